//! [`PrivatePostgres`]: a PostgreSQL server of a test's own, for what the shared server must
//! not see (other settings such as `wal_level`, password authentication, restarts and
//! crashes): `initdb` into a temporary directory, started with `pg_ctl` on a free port of
//! 127.0.0.1, stopped (immediate) on drop. As root, the server's commands run as the
//! `postgres` OS user (PostgreSQL refuses to run as root). The binaries are the newest under
//! `/usr/lib/postgresql/*/bin`, installed by `scripts/services.sh`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running private PostgreSQL server; see the module documentation.
pub struct PrivatePostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    password: Option<String>,
}

impl PrivatePostgres {
    /// Creates and starts a server: `trust` authentication without `password`,
    /// `scram-sha-256` with the `postgres` role's password set to it; `settings` are extra
    /// `name=value` server settings (`wal_level=minimal`).
    ///
    /// # Panics
    /// When the binaries are missing or `initdb` / `pg_ctl start` fail (with their output
    /// and the server log).
    pub fn start(password: Option<&str>, settings: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let bin = pg_bin();
        let data = dir.path().join("data").to_string_lossy().into_owned();
        let mut args = vec![
            "-D".to_owned(),
            data,
            "-U".to_owned(),
            "postgres".to_owned(),
            "-E".to_owned(),
            "UTF8".to_owned(),
            "--no-sync".to_owned(),
        ];
        match password {
            None => args.extend(["-A".to_owned(), "trust".to_owned()]),
            Some(pw) => {
                let file = dir.path().join("pwfile");
                std::fs::write(&file, format!("{pw}\n")).expect("pwfile");
                args.extend([
                    "-A".to_owned(),
                    "scram-sha-256".to_owned(),
                    format!("--pwfile={}", file.display()),
                ]);
            }
        }
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("chown");
            assert!(status.success(), "chown the private server's directory");
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_pg(&bin.join("initdb"), &args).unwrap_or_else(|e| panic!("{e}"));
        let server = Self {
            dir,
            bin,
            port: free_port(),
            password: password.map(str::to_owned),
        };
        server.start_again(settings);
        server
    }

    fn data(&self) -> String {
        self.dir.path().join("data").to_string_lossy().into_owned()
    }

    /// `pg_ctl start -w` (after [`PrivatePostgres::stop`]) with extra `settings`.
    ///
    /// # Panics
    /// When the server does not start, with the server log.
    pub fn start_again(&self, settings: &[&str]) {
        let mut options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1",
            self.port,
            self.dir.path().display()
        );
        for s in settings {
            options.push_str(" -c ");
            options.push_str(s);
        }
        let log = self.dir.path().join("log").to_string_lossy().into_owned();
        let args = [
            "-D",
            &self.data(),
            "-o",
            &options,
            "-l",
            &log,
            "-w",
            "-t",
            "60",
            "start",
        ];
        if let Err(e) = run_pg(&self.bin.join("pg_ctl"), &args) {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            panic!("{e}\n--- server log\n{log}");
        }
    }

    /// `pg_ctl stop -m <mode> -w` (`fast`: sessions are terminated, a checkpoint is written;
    /// `immediate`: the server quits at once and recovers from WAL at the next start).
    ///
    /// # Panics
    /// When `pg_ctl` fails.
    pub fn stop(&self, mode: &str) {
        run_pg(
            &self.bin.join("pg_ctl"),
            &["-D", &self.data(), "-m", mode, "-w", "-t", "60", "stop"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// A fast stop, then a start with `settings`.
    ///
    /// # Panics
    /// As [`PrivatePostgres::stop`] and [`PrivatePostgres::start_again`].
    pub fn restart(&self, settings: &[&str]) {
        self.stop("fast");
        self.start_again(settings);
    }

    /// The TCP port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres[:password]@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        self.url_with_password(self.password.as_deref())
    }

    /// The server's URL with another password (or none).
    pub fn url_with_password(&self, password: Option<&str>) -> String {
        match password {
            Some(pw) => format!("postgres://postgres:{pw}@127.0.0.1:{}/postgres", self.port),
            None => format!("postgres://postgres@127.0.0.1:{}/postgres", self.port),
        }
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = run_pg(
            &self.bin.join("pg_ctl"),
            &["-D", &self.data(), "-m", "immediate", "-w", "stop"],
        );
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb`.
fn pg_bin() -> PathBuf {
    let mut candidates: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    candidates.sort();
    candidates
        .pop()
        .filter(|b| b.join("initdb").exists())
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL server binaries (initdb, pg_ctl) not found under \
                 /usr/lib/postgresql; install them with scripts/services.sh"
            )
        })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `program args` as the `postgres` user when root; its output on failure.
fn run_pg(program: &Path, args: &[&str]) -> Result<(), String> {
    let output = if is_root() {
        Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(program)
            .args(args)
            .output()
    } else {
        Command::new(program).args(args).output()
    }
    .map_err(|e| format!("{}: {e}", program.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{} {args:?} failed: {}\n{}{}",
            program.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A port on 127.0.0.1 that nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
