//! `--web.config.file`: the Prometheus exporter-toolkit web configuration (the file
//! node_exporter and ebpf_exporter read): TLS server certificate, client CA and client auth
//! type, basic-auth users with bcrypt hashes, extra response headers. Unknown keys are
//! errors, as the toolkit's strict parsing makes them; errors read as the toolkit's do.
use std::{collections::BTreeMap, path::Path, sync::Arc};

use anyhow::{anyhow, bail, Context as _, Result};
use rustls::{crypto::ring, server::WebPkiClientVerifier, RootCertStore, ServerConfig};
use rustls_pki_types::{pem::PemObject as _, CertificateDer, PrivateKeyDer};
use serde::Deserialize;

use super::client_cert::AnyClientCert;

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    http_server_config: Option<HttpFile>,
    #[serde(default)]
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    #[serde(default)]
    cipher_suites: Vec<String>,
    #[serde(default)]
    curve_preferences: Vec<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    prefer_server_cipher_suites: Option<bool>,
    client_allowed_sans: Option<Vec<String>>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
struct HttpFile {
    /// tlsprof serves HTTP/1.1 only (what Prometheus scrapes with); accepted and ignored.
    #[allow(dead_code)]
    http2: Option<bool>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// What the endpoint does with a web configuration.
pub struct WebConfig {
    pub tls: Option<Arc<ServerConfig>>,
    /// User name → bcrypt hash; empty: no authentication.
    pub users: BTreeMap<String, String>,
    /// Extra response headers (the toolkit's short list).
    pub headers: Vec<(String, String)>,
}

/// The headers the toolkit lets a configuration add, with the values it allows (None: any).
const EXTRA_HEADERS: &[(&str, Option<&[&str]>)] = &[
    ("Strict-Transport-Security", None),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-XSS-Protection", None),
    ("Content-Security-Policy", None),
];

impl WebConfig {
    /// No file: plain HTTP, no authentication.
    pub fn none() -> Self {
        Self {
            tls: None,
            users: BTreeMap::new(),
            headers: Vec::new(),
        }
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
        Self::parse(&text, path.parent().unwrap_or(Path::new(".")))
            .with_context(|| format!("web config {}", path.display()))
    }

    /// Parses a configuration; relative file names are relative to `dir` (the file's folder).
    pub fn parse(text: &str, dir: &Path) -> Result<Self> {
        let f: File = if text.trim().is_empty() {
            File::default()
        } else {
            serde_yaml_ng::from_str(text)?
        };
        let users = f.basic_auth_users.unwrap_or_default();
        for (user, hash) in &users {
            bcrypt_cost(hash).with_context(|| format!("basic_auth_users: {user}"))?;
        }
        let http = f.http_server_config.unwrap_or_default();
        let mut headers = Vec::new();
        for (k, v) in http.headers {
            let Some((_, allowed)) = EXTRA_HEADERS.iter().find(|(name, _)| *name == k) else {
                bail!("HTTP header {k:?} can not be configured");
            };
            if let Some(allowed) = allowed {
                if !allowed.contains(&v.as_str()) {
                    bail!("invalid value for {k}. Expected one of: {allowed:?}, but got: {v:?}");
                }
            }
            headers.push((k, v));
        }
        let tls = match f.tls_server_config {
            Some(t) if t.enabled() => Some(Arc::new(t.server_config(dir)?)),
            _ => None,
        };
        Ok(Self { tls, users, headers })
    }
}

/// The cost of a bcrypt hash, which the toolkit checks every user's hash by at start.
fn bcrypt_cost(hash: &str) -> Result<u32> {
    let parts: Vec<&str> = hash.split('$').collect();
    match parts.as_slice() {
        ["", "2a" | "2b" | "2y" | "2x", cost, rest] if rest.len() == 53 => {
            let cost: u32 = cost.parse().map_err(|_| {
                anyhow!(
                    "crypto/bcrypt: bcrypt hashes must start with '$', but hashedSecret started with '{}'",
                    &hash[..hash.len().min(1)]
                )
            })?;
            if !(4..=31).contains(&cost) {
                bail!("crypto/bcrypt: cost {cost} is outside allowed range (4,31)");
            }
            Ok(cost)
        }
        _ if !hash.starts_with('$') => bail!(
            "crypto/bcrypt: bcrypt hashes must start with '$', but hashedSecret started with '{}'",
            hash.chars().next().map(String::from).unwrap_or_default()
        ),
        _ => bail!("crypto/bcrypt: hashedSecret too short to be a bcrypted password"),
    }
}

impl TlsFile {
    /// The toolkit's rule: any TLS field set turns TLS on (and then the rest must be right).
    fn enabled(&self) -> bool {
        self.cert.is_some()
            || self.key.is_some()
            || self.cert_file.is_some()
            || self.key_file.is_some()
            || self.client_ca.is_some()
            || self.client_ca_file.is_some()
            || self.client_auth_type.is_some()
    }

    fn server_config(self, dir: &Path) -> Result<ServerConfig> {
        let read = |what: &str, file: &Option<String>, inline: &Option<String>| -> Result<Option<Vec<u8>>> {
            match (file, inline) {
                (Some(f), _) if !f.is_empty() => {
                    let p = dir.join(f);
                    std::fs::read(&p)
                        .map(Some)
                        .map_err(|e| anyhow!("failed to read {what} ({}): {e}", p.display()))
                }
                (_, Some(text)) if !text.is_empty() => Ok(Some(text.clone().into_bytes())),
                _ => Ok(None),
            }
        };
        let given = |f: &Option<String>, t: &Option<String>| {
            f.as_deref().is_some_and(|s| !s.is_empty()) || t.as_deref().is_some_and(|s| !s.is_empty())
        };
        if !given(&self.cert_file, &self.cert) {
            bail!("missing one of cert or cert_file");
        }
        if !given(&self.key_file, &self.key) {
            bail!("missing one of key or key_file");
        }
        let cert = read("cert_file", &self.cert_file, &self.cert)?
            .ok_or_else(|| anyhow!("missing one of cert or cert_file"))?;
        let key =
            read("key_file", &self.key_file, &self.key)?.ok_or_else(|| anyhow!("missing one of key or key_file"))?;
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow!("failed to load X509KeyPair: {e}"))?;
        if chain.is_empty() {
            bail!("failed to load X509KeyPair: tls: failed to find any PEM data in certificate input");
        }
        let key = PrivateKeyDer::from_pem_slice(&key)
            .map_err(|e| anyhow!("failed to load X509KeyPair: tls: failed to find any PEM data in key input ({e})"))?;

        let mut provider = ring::default_provider();
        if !self.cipher_suites.is_empty() {
            let mut suites = Vec::new();
            for name in &self.cipher_suites {
                let s = provider
                    .cipher_suites
                    .iter()
                    .find(|s| format!("{:?}", s.suite()) == *name)
                    .ok_or_else(|| anyhow!("unknown cipher: {name}"))?;
                suites.push(*s);
            }
            // Go applies cipher_suites to TLS 1.2 only: keep TLS 1.3's.
            suites.extend(provider.cipher_suites.iter().filter(|s| s.tls13().is_some()).copied());
            provider.cipher_suites = suites;
        }
        if !self.curve_preferences.is_empty() {
            let mut groups = Vec::new();
            for name in &self.curve_preferences {
                let want = match name.as_str() {
                    "CurveP256" => "secp256r1",
                    "CurveP384" => "secp384r1",
                    "X25519" => "X25519",
                    "CurveP521" => bail!("curve CurveP521 is not offered by tlsprof's TLS library (rustls)"),
                    _ => bail!("unknown curve: {name}"),
                };
                let g = provider.kx_groups.iter().find(|g| format!("{:?}", g.name()) == want);
                groups.push(*g.ok_or_else(|| anyhow!("unknown curve: {name}"))?);
            }
            provider.kx_groups = groups;
        }
        let version = |v: &Option<String>, default: u8| -> Result<u8> {
            match v.as_deref() {
                None => Ok(default),
                Some("TLS13") => Ok(3),
                Some("TLS12") => Ok(2),
                Some(v @ ("TLS10" | "TLS11")) => {
                    bail!("{v} is not offered by tlsprof's TLS library (rustls): TLS12 and TLS13 are")
                }
                Some(v) => bail!("unknown TLS version: {v}"),
            }
        };
        let (min, max) = (version(&self.min_version, 2)?, version(&self.max_version, 3)?);
        let versions: Vec<&'static rustls::SupportedProtocolVersion> =
            [(2, &rustls::version::TLS12), (3, &rustls::version::TLS13)]
                .into_iter()
                .filter(|(n, _)| (min..=max).contains(n))
                .map(|(_, v)| v)
                .collect();
        if versions.is_empty() {
            bail!("min_version is above max_version");
        }

        let ca = read("client_ca_file", &self.client_ca_file, &self.client_ca)?;
        let auth = self.client_auth_type.as_deref().unwrap_or("");
        if ca.is_some() && matches!(auth, "" | "NoClientCert") {
            bail!("Client CA's have been configured without a Client Auth Policy");
        }
        if self.client_allowed_sans.is_some() {
            bail!("client_allowed_sans is not supported by tlsprof: verify clients with client_ca_file");
        }
        let provider = Arc::new(provider);
        let roots = || -> Result<Arc<RootCertStore>> {
            let pem = ca.as_ref().ok_or_else(|| anyhow!("{auth} requires client_ca_file"))?;
            let mut store = RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(pem) {
                store.add(c.map_err(|e| anyhow!("client_ca_file: {e}"))?)?;
            }
            if store.is_empty() {
                bail!("client_ca_file: no certificates found");
            }
            Ok(Arc::new(store))
        };
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .context("TLS versions")?;
        let builder = match auth {
            "" | "NoClientCert" => builder.with_no_client_auth(),
            "RequestClientCert" => builder.with_client_cert_verifier(Arc::new(AnyClientCert::new(provider, false))),
            "RequireAnyClientCert" | "RequireClientCert" => {
                builder.with_client_cert_verifier(Arc::new(AnyClientCert::new(provider, true)))
            }
            "VerifyClientCertIfGiven" => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(roots()?, provider)
                    .allow_unauthenticated()
                    .build()?,
            ),
            "RequireAndVerifyClientCert" => builder
                .with_client_cert_verifier(WebPkiClientVerifier::builder_with_provider(roots()?, provider).build()?),
            other => bail!("invalid ClientAuth: {other}"),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| anyhow!("failed to load X509KeyPair: {e}"))?;
        config.ignore_client_order = self.prefer_server_cipher_suites.unwrap_or(true);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "$2y$10$X0h1gDsPszWURQaxFh.zoubFi6DXncSjhoQNJgRrnGs7EsimhC7zG";

    fn err(text: &str) -> String {
        format!(
            "{:#}",
            WebConfig::parse(text, Path::new("/nonexistent"))
                .err()
                .expect("an error")
        )
    }

    #[test]
    fn users_and_headers() {
        let c = WebConfig::parse(
            &format!(
                "basic_auth_users:\n  alice: {HASH}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"
            ),
            Path::new("."),
        )
        .unwrap();
        assert!(c.tls.is_none());
        assert_eq!(c.users.get("alice").map(String::as_str), Some(HASH));
        assert_eq!(c.headers, vec![("X-Frame-Options".to_string(), "deny".to_string())]);
        assert!(WebConfig::parse("", Path::new(".")).unwrap().users.is_empty());
    }

    #[test]
    fn toolkit_errors() {
        assert!(err("tls_server_config:\n  key_file: k.pem\n").contains("missing one of cert or cert_file"));
        assert!(err("tls_server_config:\n  cert_file: c.pem\n").contains("missing one of key or key_file"));
        assert!(err("tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n")
            .contains("failed to read cert_file (/nonexistent/c.pem)"));
        assert!(err("basic_auth_users:\n  alice: plain\n").contains("bcrypt hashes must start with '$'"));
        assert!(err("basic_auth_users:\n  alice: $2y$10$short\n").contains("too short"));
        assert!(err("tls_server_cofig: {}\n").contains("unknown field `tls_server_cofig`"));
        assert!(err("http_server_config:\n  headers:\n    Server: x\n")
            .contains("HTTP header \"Server\" can not be configured"));
        assert!(err("http_server_config:\n  headers:\n    X-Frame-Options: allow\n")
            .contains("invalid value for X-Frame-Options"));
    }
}
