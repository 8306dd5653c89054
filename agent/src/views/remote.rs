//! Where `top` and `report` read the agent's figures: the agent in this process, or a
//! running agent's /metrics over HTTP or HTTPS, with what Prometheus' scrape configuration
//! gives a scrape: a CA file, a client certificate and key, a server name, basic auth (from
//! the URL's user information or the flags). The exposition is decoded into the model once
//! (model.rs).
use std::{
    io::{Read, Write},
    net::{TcpStream, ToSocketAddrs as _},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use anyhow::{anyhow, bail, Context as _, Result};
use base64::Engine as _;
use rustls::{
    crypto::ring, AlertDescription, CertificateError, ClientConfig, ClientConnection, RootCertStore, StreamOwned,
};
use rustls_pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer, ServerName};

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
    tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    /// The Authorization header's value.
    authorization: Option<String>,
}

/// How long to wait to connect, and for each read or write.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest response read.
const MAX_RESPONSE: u64 = 256 << 20;
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
            Some((Arc::new(client_config(args)?), name))
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
        Ok(Remote {
            shown,
            host,
            port,
            path,
            tls,
            authorization,
        })
    }

    /// The exposition, or one line on why not.
    pub fn get(&self) -> Result<String> {
        let shown = &self.shown;
        let h = self.host.trim_start_matches('[').trim_end_matches(']');
        let addr = (h, self.port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .with_context(|| format!("cannot reach the agent at {shown}: cannot resolve {h}"))?;
        let tcp = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .with_context(|| format!("cannot reach the agent at {shown}"))?;
        tcp.set_read_timeout(Some(IO_TIMEOUT))?;
        tcp.set_write_timeout(Some(IO_TIMEOUT))?;
        let default_port = if self.tls.is_some() { 443 } else { 80 };
        let host = if self.port == default_port {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let auth = self
            .authorization
            .as_ref()
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nAccept: text/plain\r\nUser-Agent: tlsprof\r\n{auth}Connection: close\r\n\r\n",
            self.path
        );
        let (response, cut) = match &self.tls {
            Some((config, name)) => {
                let conn = ClientConnection::new(config.clone(), name.clone()).context("TLS")?;
                let mut s = StreamOwned::new(conn, tcp);
                exchange(&mut s, &request).map_err(|e| tls_error(shown, e))?
            }
            None => exchange(&mut &tcp, &request).with_context(|| format!("{shown}: no answer"))?,
        };
        self.body(&response, cut)
    }

    /// The body of a response, if it is a 200 one.
    fn body(&self, response: &[u8], cut: bool) -> Result<String> {
        let shown = &self.shown;
        let end = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .with_context(|| format!("{shown}: no HTTP response (is it {}?)", self.other_scheme()))?;
        let head = String::from_utf8_lossy(&response[..end]);
        let mut body = &response[end + 4..];
        let status = head.lines().next().unwrap_or("");
        match status.split_whitespace().nth(1) {
            Some("200") => {}
            Some("401") if self.authorization.is_none() => bail!(
                "{shown} answered 401 Unauthorized: it needs a user name and password (--username and \
                 --password-file, or USER:PASSWORD@ in --url)"
            ),
            Some("401") => bail!("{shown} answered 401 Unauthorized: the user name or password is wrong"),
            _ => bail!("{shown} answered {status:?}"),
        }
        let header = |name: &str| {
            head.lines().skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let chunked;
        if let Some(len) = header("content-length") {
            let len: usize = len.parse().with_context(|| format!("{shown}: bad Content-Length"))?;
            if body.len() < len {
                bail!("{shown}: the response was cut short");
            }
            body = &body[..len];
        } else if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            chunked = dechunk(body).with_context(|| format!("{shown}: bad chunked response"))?;
            body = &chunked;
        } else if cut {
            bail!("{shown}: the response was cut short");
        }
        String::from_utf8(body.to_vec()).with_context(|| format!("{shown}: the response is not UTF-8"))
    }

    fn other_scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "http://"
        } else {
            "https://"
        }
    }
}

/// Sends the request and reads the response to the end; `true` beside it when the peer
/// closed without ending TLS properly (the length then says whether it is whole).
fn exchange<S: Read + Write>(s: &mut S, request: &str) -> std::io::Result<(Vec<u8>, bool)> {
    s.write_all(request.as_bytes())?;
    s.flush()?;
    let mut out = Vec::new();
    match s.take(MAX_RESPONSE).read_to_end(&mut out) {
        Ok(_) => Ok((out, false)),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => Ok((out, true)),
        Err(e) => Err(e),
    }
}

/// A chunked body, joined.
fn dechunk(mut b: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").context("no chunk size")?;
        let size = std::str::from_utf8(&b[..eol])?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(b.get(..size).context("a chunk cut short")?);
        b = b.get(size + 2..).context("a chunk cut short")?;
    }
}

/// A TLS failure in words that say what to change.
fn tls_error(shown: &str, e: std::io::Error) -> anyhow::Error {
    let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
        return anyhow!("{shown}: {e}");
    };
    use rustls::Error::*;
    let why = match tls {
        InvalidCertificate(CertificateError::UnknownIssuer) => {
            "the agent's certificate is not signed by a CA tlsprof trusts (--ca-file)".to_string()
        }
        InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }) => {
            "the agent's certificate is not valid for this host name (--server-name)".to_string()
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
    for c in CertificateDer::pem_slice_iter(&pem) {
        let c = c.map_err(|e| anyhow!("{what} {}: {e}", ca.display()))?;
        // A system bundle may hold a certificate rustls cannot use; skip it there.
        if let Err(e) = roots.add(c) {
            if args.ca_file.is_some() {
                bail!("{what} {}: {e}", ca.display());
            }
        }
    }
    if roots.is_empty() {
        bail!("{what} {}: no certificates in it", ca.display());
    }
    let builder = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_root_certificates(roots);
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

    #[test]
    fn dechunks() {
        assert_eq!(dechunk(b"3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n").unwrap(), b"abcde");
        assert!(dechunk(b"9\r\nabc\r\n").is_err());
    }
}
