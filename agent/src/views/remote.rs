//! Where `top` and `report` read the agent's figures: the agent in this process, or a
//! running agent's /metrics over HTTP or HTTPS (hyper's HTTP/1.1 client over rustls), with
//! what Prometheus' scrape configuration gives a scrape: a CA file, a client certificate and
//! key, a server name, basic auth (from the URL's user information or the flags). The
//! exposition is decoded into the model once (model.rs).
use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{anyhow, bail, Context as _, Result};
use base64::Engine as _;
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper::{body::Bytes, header, Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::{
    client::{
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
        verify_server_name, WebPkiServerVerifier,
    },
    crypto::ring,
    server::ParsedCertificate,
    AlertDescription, CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use rustls_pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::{net::TcpStream, runtime::Runtime, time::timeout};
use tokio_rustls::TlsConnector;

use super::model::Figures;
use crate::metrics::Metrics;

/// How to read a running agent (Prometheus' scrape configuration names these ca_file,
/// cert_file, key_file, server_name and basic_auth).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct RemoteArgs {
    /// Read a running agent's metrics (http[s]://[USER:PASSWORD@]HOST:PORT/metrics) instead
    /// of attaching probes from this process; --pid and --comm then filter by process name.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,
    /// With an https:// --url: the CA certificates (PEM) that signed the agent's certificate
    /// [default: the system's].
    #[arg(long, value_name = "FILE", requires = "url")]
    pub ca_file: Option<PathBuf>,
    /// With an https:// --url: a client certificate (PEM), for an agent whose web
    /// configuration asks for one (client_auth_type).
    #[arg(long, visible_alias = "cert", value_name = "FILE", requires_all = ["url", "key_file"])]
    pub cert_file: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, visible_alias = "key", value_name = "FILE", requires = "cert_file")]
    pub key_file: Option<PathBuf>,
    /// With an https:// --url: the name the agent's certificate must be valid for
    /// [default: the URL's host].
    #[arg(long, value_name = "NAME", requires = "url")]
    pub server_name: Option<String>,
    /// Basic authentication: the user name (or USER@ in --url).
    #[arg(long, visible_alias = "user", value_name = "NAME", requires = "url")]
    pub username: Option<String>,
    /// Basic authentication: a file whose first line is the password (or USER:PASSWORD@
    /// in --url).
    #[arg(long, value_name = "FILE", requires = "url")]
    pub password_file: Option<PathBuf>,
}

/// Where the figures come from.
pub enum Source {
    /// The agent running in this process.
    Local(Arc<Metrics>),
    /// A running agent's /metrics endpoint.
    Remote(Remote),
}

impl Source {
    pub fn fetch(&self) -> Result<Figures> {
        match self {
            Source::Local(m) => Ok(Figures::of(m)),
            Source::Remote(r) => Figures::decode(&r.get()?).with_context(|| r.shown.clone()),
        }
    }
}

/// A running agent's endpoint, and how to talk to it.
pub struct Remote {
    /// The URL without its password, for messages.
    shown: String,
    host: String,
    port: u16,
    path: String,
    tls: Option<(TlsConnector, ServerName<'static>)>,
    /// The Authorization header's value.
    authorization: Option<String>,
    /// Where the request runs: the views are synchronous.
    runtime: Runtime,
}

/// How long to wait to connect, and then for the whole answer.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest response read.
const MAX_RESPONSE: usize = 256 << 20;
/// Where distributions keep the system's CA certificates.
const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// %XX escapes in a URL's user information.
fn percent_decode(s: &str) -> Result<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3).context("a bad %-escape in the user information")?;
            out.push(u8::from_str_radix(hex, 16).context("a bad %-escape in the user information")?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).context("the user information is not UTF-8")
}

impl Remote {
    pub fn new(url: &str, args: &RemoteArgs) -> Result<Remote> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            bail!("{url}: not an http:// or https:// URL");
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/metrics".to_string()),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let scheme = if tls { "https" } else { "http" };
        let shown = format!("{scheme}://{hostport}{path}");
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
                h.to_string(),
                p.parse::<u16>().map_err(|_| anyhow!("{shown}: bad port {p:?}"))?,
            ),
            _ => (hostport.to_string(), if tls { 443 } else { 80 }),
        };
        if host.is_empty() {
            bail!("{shown}: no host");
        }
        let mut user = None;
        let mut password = None;
        if let Some(u) = userinfo {
            let (name, pass) = u.split_once(':').map_or((u, None), |(n, p)| (n, Some(p)));
            user = Some(percent_decode(name).with_context(|| shown.clone())?);
            password = pass.map(percent_decode).transpose().with_context(|| shown.clone())?;
        }
        if let Some(name) = &args.username {
            if user.is_some() {
                bail!("--username and a user in --url: give one");
            }
            user = Some(name.clone());
        }
        if let Some(file) = &args.password_file {
            if password.is_some() {
                bail!("--password-file and a password in --url: give one");
            }
            let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
            password = Some(text.lines().next().unwrap_or("").to_string());
        }
        if password.is_some() && user.is_none() {
            bail!("a password without a user name (--username, or USER:PASSWORD@ in --url)");
        }
        let authorization = user.map(|u| {
            let pair = format!("{u}:{}", password.unwrap_or_default());
            format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))
        });
        let tls = if tls {
            let name = args
                .server_name
                .clone()
                .unwrap_or_else(|| host.trim_start_matches('[').trim_end_matches(']').to_string());
            let name = ServerName::try_from(name.clone()).map_err(|_| anyhow!("{name:?} is not a host name"))?;
            Some((TlsConnector::from(Arc::new(client_config(args)?)), name))
        } else {
            for (given, flag) in [
                (args.ca_file.is_some(), "--ca-file"),
                (args.cert_file.is_some(), "--cert-file"),
                (args.server_name.is_some(), "--server-name"),
            ] {
                if given {
                    bail!("{flag} is for an https:// --url, and {shown} is http://");
                }
            }
            None
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .context("cannot start the HTTP client's runtime")?;
        Ok(Remote {
            shown,
            host,
            port,
            path,
            tls,
            authorization,
            runtime,
        })
    }

    /// The exposition, or one line on why not.
    pub fn get(&self) -> Result<String> {
        self.runtime.block_on(self.fetch())
    }

    async fn fetch(&self) -> Result<String> {
        let shown = &self.shown;
        let h = self.host.trim_start_matches('[').trim_end_matches(']');
        let tcp = match timeout(CONNECT_TIMEOUT, TcpStream::connect((h, self.port))).await {
            Ok(tcp) => tcp.with_context(|| format!("cannot reach the agent at {shown}"))?,
            Err(_) => bail!("cannot reach the agent at {shown}: no answer in {CONNECT_TIMEOUT:?}"),
        };
        let request = self.request()?;
        let answer = async {
            match &self.tls {
                Some((connector, name)) => {
                    let tls = connector
                        .connect(name.clone(), tcp)
                        .await
                        .map_err(|e| self.failed(&e))?;
                    self.send(TokioIo::new(tls), request).await
                }
                None => self.send(TokioIo::new(tcp), request).await,
            }
        };
        timeout(ANSWER_TIMEOUT, answer)
            .await
            .unwrap_or_else(|_| Err(anyhow!("{shown}: no whole answer in {ANSWER_TIMEOUT:?}")))
    }

    fn request(&self) -> Result<Request<Empty<Bytes>>> {
        let default_port = if self.tls.is_some() { 443 } else { 80 };
        let host = if self.port == default_port {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let mut request = Request::get(self.path.as_str())
            .header(header::HOST, host)
            .header(header::ACCEPT, "text/plain")
            .header(header::USER_AGENT, "tlsprof")
            .header(header::CONNECTION, "close");
        if let Some(a) = &self.authorization {
            request = request.header(header::AUTHORIZATION, a);
        }
        request
            .body(Empty::new())
            .map_err(|e| anyhow!("{}: not a request tlsprof can send: {e}", self.shown))
    }

    /// One request on a new connection, and the body of its answer if that is a 200 one.
    async fn send<T>(&self, io: T, request: Request<Empty<Bytes>>) -> Result<String>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let shown = &self.shown;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(|e| self.failed(&e))?;
        let driver = tokio::spawn(connection);
        let answer = async {
            let response = sender.send_request(request).await.map_err(|e| self.failed(&e))?;
            match response.status() {
                StatusCode::OK => {}
                StatusCode::UNAUTHORIZED if self.authorization.is_none() => bail!(
                    "{shown} answered 401 Unauthorized: it needs a user name and password (--username and \
                     --password-file, or USER:PASSWORD@ in --url)"
                ),
                StatusCode::UNAUTHORIZED => {
                    bail!("{shown} answered 401 Unauthorized: the user name or password is wrong")
                }
                status => bail!("{shown} answered {status}"),
            }
            let body = Limited::new(response.into_body(), MAX_RESPONSE)
                .collect()
                .await
                .map_err(|e| match e.downcast::<hyper::Error>() {
                    Ok(e) => self.failed(&*e),
                    Err(e) => anyhow!("{shown}: the response is over {MAX_RESPONSE} bytes ({e})"),
                })?
                .to_bytes();
            String::from_utf8(body.to_vec()).with_context(|| format!("{shown}: the response is not UTF-8"))
        };
        let body = answer.await;
        driver.abort();
        body
    }

    /// Why a connection or its exchange failed, in words that say what to change.
    fn failed(&self, e: &(dyn std::error::Error + 'static)) -> anyhow::Error {
        let shown = &self.shown;
        // rustls' error inside an I/O error, maybe inside hyper's
        let mut cause = Some(e);
        while let Some(c) = cause {
            if let Some(tls) = c
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|i| i.downcast_ref::<rustls::Error>())
            {
                return tls_error(shown, tls);
            }
            cause = c.source();
        }
        match e.downcast_ref::<hyper::Error>() {
            Some(h) if h.is_parse() || h.is_incomplete_message() => {
                anyhow!("{shown}: no HTTP response (is it {}?)", self.other_scheme())
            }
            _ => anyhow!("{shown}: {e}"),
        }
    }

    fn other_scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "http://"
        } else {
            "https://"
        }
    }
}

/// A TLS failure in words that say what to change.
fn tls_error(shown: &str, tls: &rustls::Error) -> anyhow::Error {
    use rustls::Error::*;
    let why = match tls {
        InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the agent's certificate is not signed by a CA tlsprof trusts (--ca-file)".to_string()
        }
        InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }) => {
            "the agent's certificate is not valid for this host name (--server-name)".to_string()
        }
        e if ca_as_end_entity(e) => {
            "the agent's certificate is a CA's (CA:TRUE, as `openssl req -x509` makes a self-signed one) and not \
             one tlsprof was given: give the agent's own certificate as --ca-file"
                .to_string()
        }
        InvalidCertificate(c) => format!("the agent's certificate is not valid: {c:?}"),
        AlertReceived(
            a @ (AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown
            | AlertDescription::HandshakeFailure
            | AlertDescription::DecryptError),
        ) => format!(
            "the agent refused the handshake ({a:?}): does it need a client certificate (--cert-file, \
             --key-file) that its client CA signed?"
        ),
        InvalidMessage(_) => "the agent does not speak TLS (is it http://?)".to_string(),
        other => other.to_string(),
    };
    anyhow!("{shown}: TLS failed: {why}")
}

fn read_pem(what: &str, file: &Path) -> Result<Vec<u8>> {
    std::fs::read(file).with_context(|| format!("cannot read {what} {}", file.display()))
}

/// The TLS client: the agent's certificate checked against --ca-file (or the system's
/// CAs), with the client certificate when one is given.
fn client_config(args: &RemoteArgs) -> Result<ClientConfig> {
    let (what, ca) = match &args.ca_file {
        Some(f) => ("--ca-file", f.clone()),
        None => {
            let system = std::env::var_os("SSL_CERT_FILE")
                .map(PathBuf::from)
                .into_iter()
                .chain(SYSTEM_CA_FILES.iter().map(PathBuf::from))
                .find(|p| p.is_file())
                .context("no --ca-file, and no system CA certificates found")?;
            ("the system's CA file", system)
        }
    };
    let pem = read_pem(what, &ca)?;
    let mut roots = RootCertStore::empty();
    let mut given = Vec::new();
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| anyhow!("{what} {}: {e}", ca.display()))?;
        // A system bundle may hold a certificate rustls cannot use; skip it there.
        match roots.add(c.clone()) {
            Err(e) if args.ca_file.is_some() => bail!("{what} {}: {e}", ca.display()),
            _ if args.ca_file.is_some() => given.push(c),
            _ => {}
        }
    }
    if roots.is_empty() {
        bail!("{what} {}: no certificates in it", ca.display());
    }
    let provider = Arc::new(ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| anyhow!("{what} {}: {e}", ca.display()))?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AgentCertVerifier { webpki, given }));
    let mut config = match (&args.cert_file, &args.key_file) {
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read_pem("--cert-file", cert)?)
                .collect::<Result<_, _>>()
                .map_err(|e| anyhow!("--cert-file {}: {e}", cert.display()))?;
            if chain.is_empty() {
                bail!("--cert-file {}: no certificate in it", cert.display());
            }
            let key = PrivateKeyDer::from_pem_slice(&read_pem("--key-file", key)?)
                .map_err(|e| anyhow!("--key-file {}: {e}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| anyhow!("--cert-file and --key-file: {e}"))?
        }
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// webpki refused a CA certificate as the server's (CA:TRUE: `openssl req -x509` marks a
/// self-signed one so).
fn ca_as_end_entity(e: &rustls::Error) -> bool {
    matches!(e, rustls::Error::InvalidCertificate(CertificateError::Other(o))
        if matches!(o.0.downcast_ref(), Some(webpki::Error::CaUsedAsEndEntity)))
}

/// The agent's certificate checked as webpki checks a server's (a chain to a trusted CA,
/// its dates, its name), with one case more, which OpenSSL, Go's crypto/x509 (so
/// Prometheus) and curl accept: the certificate is itself one of the --ca-file ones. A
/// self-signed certificate made by `openssl req -x509`, the exporter toolkit's documented
/// recipe, is marked CA:TRUE, and webpki refuses a CA certificate as a server's
/// (CaUsedAsEndEntity). Given as --ca-file, it is trusted as given: webpki has checked its
/// dates before that refusal, and its name is still checked.
#[derive(Debug)]
struct AgentCertVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// The --ca-file certificates (none when the system's CAs are used).
    given: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for AgentCertVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(e) if ca_as_end_entity(&e) && self.given.iter().any(|c| c.as_ref() == end_entity.as_ref()) => {
                verify_server_name(&ParsedCertificate::try_from(end_entity)?, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(url: &str) -> Result<Remote> {
        Remote::new(url, &RemoteArgs::default())
    }

    #[test]
    fn reads_urls() {
        let r = remote("http://127.0.0.1:9435/metrics").unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.path.as_str()),
            ("127.0.0.1", 9435, "/metrics")
        );
        assert!(r.authorization.is_none() && r.tls.is_none());
        let r = remote("http://al%40ice:p%3Ass:w@[::1]:9").unwrap();
        assert_eq!((r.host.as_str(), r.port, r.path.as_str()), ("[::1]", 9, "/metrics"));
        // base64("al@ice:p:ss:w")
        assert_eq!(r.authorization.as_deref(), Some("Basic YWxAaWNlOnA6c3M6dw=="));
        assert_eq!(r.shown, "http://[::1]:9/metrics", "no password in messages");
        assert_eq!(remote("http://h").unwrap().port, 80);
        let e = |url: &str| remote(url).err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(e("ftp://h/metrics").contains("not an http:// or https:// URL"));
        assert!(e("http://h:99999/").contains("bad port"));
        assert!(e("http://:9/").contains("no host"));
        assert!(e("http://u:%zz@h/").contains("%-escape"));
        let ca = RemoteArgs {
            ca_file: Some("/nonexistent".into()),
            ..Default::default()
        };
        let err = Remote::new("http://h/", &ca).err().unwrap().to_string();
        assert!(err.contains("--ca-file is for an https:// --url"), "{err}");
        let err = format!("{:#}", Remote::new("https://h/", &ca).err().unwrap());
        assert!(err.contains("cannot read --ca-file /nonexistent"), "{err}");
    }
}
