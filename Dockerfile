# The tlsprof image used by deploy/compose and deploy/kubernetes:
#   docker build -t tlsprof:latest .
FROM rust:1.90-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends clang llvm libbpf-dev libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked && cp target/release/tlsprof /tlsprof

FROM debian:12-slim
COPY --from=build /tlsprof /usr/local/bin/tlsprof
ENTRYPOINT ["/usr/local/bin/tlsprof"]
CMD ["run", "--listen", "127.0.0.1:9435"]
