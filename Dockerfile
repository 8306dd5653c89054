# The tlsprof image used by deploy/compose and deploy/kubernetes: the static binary of
# `make dist` (dist/bin/<arch>/tlsprof, BPF object inside) and nothing else. It links no
# library, runs no other program and reads only the host's /proc and /sys, so the image
# needs no base system:
#   make dist && docker build -t tlsprof:latest .
# For both architectures in one image: docker buildx build --platform linux/amd64,linux/arm64
FROM scratch
ARG TARGETARCH=amd64
COPY dist/bin/${TARGETARCH}/tlsprof /usr/local/bin/tlsprof
ENTRYPOINT ["/usr/local/bin/tlsprof"]
CMD ["run", "--listen", "127.0.0.1:9435"]
