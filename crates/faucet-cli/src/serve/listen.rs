//! `--listen ADDR`: an IP address and port (`127.0.0.1:7373`, `[::1]:7373`) or a host name
//! and port (`localhost:7373`), resolved once at start. The server binds the first resolved
//! address that can be bound (as `TcpListener::bind` does) and counts as on loopback only
//! when **every** resolved address is a loopback one — a name that also resolves to a
//! routable address is treated as off loopback, so it needs the API token.

use std::net::SocketAddr;

use faucet_core::FaucetError;

/// Where `--listen` points: the addresses it resolved to.
#[derive(Debug, Clone)]
pub(crate) struct Listen {
    /// The addresses it resolved to (at least one).
    pub(crate) addrs: Vec<SocketAddr>,
}

impl Listen {
    /// Resolves `text` (`host:port`, `[v6]:port` or `ip:port`).
    ///
    /// # Errors
    /// [`FaucetError::Config`] at `--listen` when it has no port, the name does not resolve,
    /// or it resolves to no address — with the resolver's cause.
    pub(crate) async fn resolve(text: &str) -> Result<Self, FaucetError> {
        let bad = |why: String| {
            FaucetError::config(
                "--listen",
                format!(
                    "{:?} {why}; write `HOST:PORT` (`127.0.0.1:7373`, `localhost:7373`, \
                     `[::1]:7373`, `0.0.0.0:7373`)",
                    crate::output::clip(text)
                ),
            )
        };
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Self { addrs: vec![addr] });
        }
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(bad("has no port".to_owned()));
        };
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(bad("is not a host name and port".to_owned()));
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(text)
            .await
            .map_err(|e| bad(format!("does not resolve ({e})")))?
            .collect();
        if addrs.is_empty() {
            return Err(bad("resolves to no address".to_owned()));
        }
        Ok(Self { addrs })
    }

    /// Whether every resolved address is a loopback address (only this host can connect).
    pub(crate) fn is_loopback(&self) -> bool {
        self.addrs.iter().all(|a| a.ip().is_loopback())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn names_resolve_and_loopback_needs_every_address() {
        let l = Listen::resolve("localhost:0").await.expect("localhost");
        assert!(l.is_loopback(), "{l:?}");
        assert!(
            Listen::resolve("127.0.0.1:7373")
                .await
                .expect("ip")
                .is_loopback()
        );
        assert!(
            Listen::resolve("[::1]:7373")
                .await
                .expect("v6")
                .is_loopback()
        );
        assert!(
            !Listen::resolve("0.0.0.0:7373")
                .await
                .expect("any")
                .is_loopback()
        );
        let mixed = Listen {
            addrs: vec![
                "127.0.0.1:1".parse().expect("addr"),
                "10.0.0.1:1".parse().expect("addr"),
            ],
        };
        assert!(!mixed.is_loopback());
        for bad in [
            "localhost",
            "localhost:port",
            ":7373",
            "no-such-host.invalid:7373",
        ] {
            let e = Listen::resolve(bad).await.expect_err(bad).to_string();
            assert!(e.contains("--listen"), "{e}");
        }
    }
}
