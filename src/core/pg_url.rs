//! A PostgreSQL connection url as users write it (libpq's form), made into a connection.
//!
//! `postgresql://[user[:password]@][host][:port][,host[:port]…][/dbname][?param=value&…]`,
//! with what the url leaves out taken from the `PG*` environment variables and libpq's
//! defaults, and TLS per `sslmode` as libpq does it. The password never leaves this
//! file: [`Target::display`] and every error are written without it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use postgres::config::SslMode;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::percent::decode;

/// libpq's port when neither the url nor `PGPORT` names one.
const DEFAULT_PORT: u16 = 5432;
/// The unix socket directory of Debian's and Ubuntu's servers, which libpq there tries
/// first; elsewhere the default host is `localhost`.
const DEFAULT_SOCKET_DIR: &str = "/var/run/postgresql";
/// How long a connect may take when neither the url nor `PGCONNECT_TIMEOUT` says.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Client TCP keepalives, so that a lock held by a vanished server (or a cut network) is
/// noticed in about 11 s rather than the kernel's two hours.
const KEEPALIVES_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVES_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVES_COUNT: u32 = 3;

/// The parameters this file understands in a url's query.
const PARAMS: &[&str] = &[
    "host",
    "port",
    "user",
    "password",
    "dbname",
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "options",
];

/// Parameters libpq knows that this library does not implement: named as such rather
/// than as unknown.
const LIBPQ_ONLY: &[&str] = &[
    "hostaddr",
    "passfile",
    "require_auth",
    "channel_binding",
    "client_encoding",
    "fallback_application_name",
    "replication",
    "gssencmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslpassword",
    "sslcertmode",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
    "scram_client_key",
    "scram_server_key",
];

/// Said instead of any piece of a url that may hold part of a password the parser could
/// not tell apart (an unescaped `@`, `/`, `?` or `:` in it).
const MISPLACED_AT: &str = "the url has an '@' after its host part: percent-encode '@', ':', \
     '/' and '?' in the user name and password (%40, %3A, %2F, %3F) and '@' in the \
     database name";

/// A parsed target: how to connect, and how to show it.
#[derive(Clone)]
pub struct Target {
    /// Everything but the application name, which each connection sets; holds the password.
    config: postgres::Config,
    /// The TLS client for `sslmode` (unused when it is `disable`).
    tls: MakeRustlsConnect,
    /// Bounds a connect or a cancel request, per host; `None` when the url says 0.
    connect_timeout: Option<Duration>,
    /// How many hosts are tried in turn, each within `connect_timeout`.
    hosts: usize,
    /// The url's or `PGAPPNAME`'s; else each connection gets the scope's default.
    application_name: Option<String>,
    /// The url as given, less its password.
    display: String,
    /// Where a connection goes, after the environment and the defaults: for errors.
    effective: String,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Target").field(&self.display).finish()
    }
}

/// The pieces a url (or the environment) gave, before the defaults; `None` = not given.
#[derive(Default)]
struct Given {
    user: Option<String>,
    /// Bytes: a password need not be UTF-8.
    password: Option<Vec<u8>>,
    hosts: Option<Vec<String>>,
    ports: Option<Vec<Option<u16>>>,
    dbname: Option<String>,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    connect_timeout: Option<String>,
    application_name: Option<String>,
    keepalives: Option<String>,
    keepalives_idle: Option<String>,
    keepalives_interval: Option<String>,
    keepalives_count: Option<String>,
    tcp_user_timeout: Option<String>,
    options: Option<String>,
}

/// What the machine contributes to the defaults; a parameter so tests can pin it.
struct Local {
    /// The name of the user this process runs as (libpq's default user name).
    os_user: Option<String>,
    /// Where `~/.postgresql/root.crt` is looked for.
    home: Option<PathBuf>,
    /// Whether [`DEFAULT_SOCKET_DIR`] exists (then it is the default host).
    socket_dir: bool,
}

impl Local {
    fn of_this_process(env: &dyn Fn(&str) -> Option<String>) -> Local {
        let (os_user, pw_home) = os_user_and_home();
        let home = nonempty(env("HOME")).map(PathBuf::from).or(pw_home);
        Local {
            os_user: os_user.or_else(|| nonempty(env("USER"))),
            home,
            socket_dir: Path::new(DEFAULT_SOCKET_DIR).is_dir(),
        }
    }
}

impl Target {
    /// Parse a libpq URL (`postgresql://` or `postgres://`), filling what it leaves out from
    /// `env` (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, PGSSLROOTCERT,
    /// PGCONNECT_TIMEOUT, PGAPPNAME, and PGOPTIONS as libpq; user defaults to the OS user name,
    /// database to the user). Errors are messages for a ValueError that never contain the
    /// password.
    pub fn parse(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Target, String> {
        parse_with(url, env, &Local::of_this_process(env))
    }

    /// Whether `other` names the same database by the same hosts and ports (one reached
    /// by other names is not recognised as the same).
    pub fn same_database(&self, other: &Target) -> bool {
        let (a, b) = (&self.config, &other.config);
        a.get_hosts() == b.get_hosts()
            && a.get_ports() == b.get_ports()
            && a.get_dbname() == b.get_dbname()
    }

    /// The url without the password (for `mgr.url`, reprs, errors): same scheme, user,
    /// host(s), port, db and query parameters except password-bearing ones.
    pub fn display(&self) -> &str {
        &self.display
    }

    /// The application_name to use: the url's/PGAPPNAME's if given, else `default`.
    pub fn application_name_or(&self, default: &str) -> String {
        self.application_name
            .clone()
            .unwrap_or_else(|| default.to_owned())
    }

    /// Open a new connection (blocking, bounded by connect_timeout per host), with TLS per
    /// sslmode, client TCP keepalives, and `application_name` = `app`.
    pub fn connect(&self, app: &str) -> Result<postgres::Client, String> {
        let mut config = self.config.clone();
        config.application_name(app);
        let tls = self.tls.clone();
        match bounded(self.limit(), move || config.connect(tls)) {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(format!(
                "cannot connect to {}: {}",
                self.effective,
                cause(&e)
            )),
            Err(why) => Err(format!("cannot connect to {}: {why}", self.effective)),
        }
    }

    /// Send the wire-protocol cancel for the statement running on the connection `token`
    /// came from (blocking, bounded by connect_timeout), with the same TLS settings.
    pub fn cancel(&self, token: &postgres::CancelToken) -> Result<(), String> {
        let token = token.clone();
        let tls = self.tls.clone();
        match bounded(self.limit(), move || token.cancel_query(tls)) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!(
                "cannot send a cancel request to {}: {}",
                self.effective,
                cause(&e)
            )),
            Err(why) => Err(format!(
                "cannot send a cancel request to {}: {why}",
                self.effective
            )),
        }
    }

    /// The whole attempt's bound: the client library bounds only the TCP connect (per
    /// host), not the TLS handshake or the startup exchange that follow, which a server
    /// that accepts and never answers would stall forever.
    fn limit(&self) -> Option<Duration> {
        let hosts = u32::try_from(self.hosts).unwrap_or(u32::MAX);
        self.connect_timeout.map(|t| t.saturating_mul(hosts))
    }
}

/// Runs `work` on a thread of its own and waits at most `limit` for it. On time-out the
/// thread is left to finish by itself (its socket is its own; nothing is shared), which
/// the blocking client offers no way to interrupt.
fn bounded<T: Send + 'static>(
    limit: Option<Duration>,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let Some(limit) = limit else {
        return Ok(work());
    };
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("ctxlock-pg-connect".to_owned())
        .spawn(move || {
            // The receiver may have given up: then the result is dropped here.
            let _ = tx.send(work());
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    match rx.recv_timeout(limit) {
        Ok(result) => Ok(result),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(format!(
            "no answer within {} s (connect_timeout)",
            limit.as_secs_f64()
        )),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err("the connecting thread panicked".into()),
    }
}

/// The part of a client error worth showing: the server's message, or the socket's.
fn cause(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.message().to_owned();
    }
    match std::error::Error::source(e) {
        Some(source) => source.to_string(),
        None => e.to_string(),
    }
}

fn parse_with(
    url: &str,
    env: &dyn Fn(&str) -> Option<String>,
    local: &Local,
) -> Result<Target, String> {
    // The startup message's strings end at a NUL: one in the url would cut a value short.
    if url.contains('\0') {
        return Err("the url holds a NUL character".to_owned());
    }
    let (scheme, rest) = ["postgresql://", "postgres://"]
        .iter()
        .find_map(|s| url.strip_prefix(s).map(|rest| (*s, rest)))
        .ok_or("a PostgreSQL url starts with 'postgresql://' or 'postgres://'")?;
    let mut given = Given::default();

    // The host part ends at the first '/' or '?'; a user name and password end at its
    // last '@'. An '@' further on means a user name or password held an unescaped '/'
    // or '?': then nothing of the url may be echoed, since any piece of it may be a
    // piece of the password.
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (path, query) = match tail.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (tail, None),
    };
    if path.contains('@') {
        return Err(MISPLACED_AT.to_owned());
    }
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    if userinfo.is_none() && tail.contains('@') && !ports_look_right(hostlist) {
        return Err(MISPLACED_AT.to_owned());
    }
    let mut shown_user = "";
    if let Some(userinfo) = userinfo {
        let (user, password) = match userinfo.split_once(':') {
            Some((user, password)) => (user, Some(password)),
            None => (userinfo, None),
        };
        shown_user = user;
        given.user = nonempty(Some(decode_str(user, "the user name")?));
        if let Some(password) = password {
            let bytes = decode(password).map_err(|_| "invalid percent-encoding in the password")?;
            given.password = Some(bytes).filter(|p| !p.is_empty());
        }
    }
    if !hostlist.is_empty() {
        let mut hosts = Vec::new();
        let mut ports = Vec::new();
        for element in hostlist.split(',') {
            let (host, port) = split_host_port(element)?;
            hosts.push(host);
            ports.push(port);
        }
        given.hosts = Some(hosts);
        if ports.iter().any(Option::is_some) {
            given.ports = Some(ports);
        }
    }
    let db = path.strip_prefix('/').unwrap_or(path);
    if !db.is_empty() {
        given.dbname = Some(decode_str(db, "the database name")?);
    }

    // The display keeps the url's own spelling, less the password: `user:pw@` becomes
    // `user@` (or nothing), and the query loses its password pieces.
    let mut display = String::from(scheme);
    if !shown_user.is_empty() {
        display.push_str(shown_user);
        display.push('@');
    }
    display.push_str(hostlist);
    display.push_str(path);
    if let Some(query) = query {
        // A password holding an unescaped '@' and '?' spills into the query.
        let spilled = given.password.is_some() && query.contains('@');
        let kept = parse_query(query, spilled, &mut given)?;
        if !kept.is_empty() {
            display.push('?');
            display.push_str(&kept.join("&"));
        }
    }
    finish(given, env, local, display)
}

/// Whether every element of a host list has a port of digits or none: else a ':' in it
/// is rather a password's separator (`user:pass/word@host`).
fn ports_look_right(hostlist: &str) -> bool {
    hostlist.split(',').all(|element| {
        let after_host = match element.strip_prefix('[') {
            Some(bracketed) => bracketed.split_once(']').map_or("", |(_, after)| after),
            None => element.find(':').map_or("", |i| &element[i..]),
        };
        match after_host.strip_prefix(':') {
            Some(port) => !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()),
            None => after_host.is_empty(),
        }
    })
}

/// One element of the url's host list: `host`, `host:port`, `[v6]`, `[v6]:port`, or a
/// percent-encoded unix socket directory (`%2Fvar%2Frun%2Fpostgresql`). An empty host is
/// the default one.
fn split_host_port(element: &str) -> Result<(String, Option<u16>), String> {
    let (host, port) = match element.strip_prefix('[') {
        Some(bracketed) => {
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| format!("the IPv6 host {element:?} lacks its closing ']'"))?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or_else(|| {
                    format!("unexpected {after:?} after the IPv6 host [{host}] in the url")
                })?),
            };
            (host, port)
        }
        None => match element.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (element, None),
        },
    };
    let host = decode_str(host, "the host")?;
    let port = match port {
        Some(port) => parse_port(&decode_str(port, "the port")?)?,
        None => None,
    };
    Ok((host, port))
}

/// A port, or `None` for an empty one (libpq's default then).
fn parse_port(port: &str) -> Result<Option<u16>, String> {
    if port.is_empty() {
        return Ok(None);
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 && port.bytes().all(|b| b.is_ascii_digit()) => Ok(Some(p)),
        _ => Err(format!("invalid port {port:?}: a number from 1 to 65535")),
    }
}

/// Reads the query into `given`; returns its pieces to display (all but the password).
/// Later pieces override earlier ones and the url's own parts, as in libpq.
fn parse_query<'a>(
    query: &'a str,
    spilled: bool,
    given: &mut Given,
) -> Result<Vec<&'a str>, String> {
    let mut kept = Vec::new();
    // After a password piece, a malformed or unknown one may be the rest of a password
    // holding an unescaped '&': then it is not echoed.
    let mut after_password = spilled;
    for piece in query.split('&').filter(|p| !p.is_empty()) {
        let Some((key, value)) = piece.split_once('=') else {
            return Err(if after_password {
                "the url has a query parameter without '=', not shown as it may be a piece \
                 of the password: percent-encode '&', '?' and '@' in the password (%26, \
                 %3F, %40)"
                    .to_owned()
            } else {
                format!(
                    "the url's query parameter {piece:?} has no '=' (percent-encode '&' and \
                     '=' inside values)"
                )
            });
        };
        let key = match decode_str(key, "a query parameter's name") {
            Ok(key) => key,
            Err(_) if after_password => return Err(unknown_after_password()),
            Err(e) => return Err(e),
        };
        if !PARAMS.contains(&key.as_str()) {
            return Err(if after_password {
                unknown_after_password()
            } else if LIBPQ_ONLY.contains(&key.as_str()) {
                format!("the url parameter {key:?} is not supported by ctxlock")
            } else {
                format!(
                    "unknown url parameter {key:?}; the known ones are {}",
                    PARAMS.join(", ")
                )
            });
        }
        after_password = key == "password";
        if after_password {
            let bytes = decode(value).map_err(|_| "invalid percent-encoding in the password")?;
            given.password = Some(bytes).filter(|p| !p.is_empty());
            continue;
        }
        kept.push(piece);
        let value = decode_str(value, &format!("the url parameter {key:?}"))?;
        let value = nonempty(Some(value));
        match key.as_str() {
            "host" => {
                given.hosts = value.map(|v| v.split(',').map(str::to_owned).collect());
            }
            "port" => {
                given.ports = match value {
                    Some(v) => Some(v.split(',').map(parse_port).collect::<Result<_, _>>()?),
                    None => None,
                };
            }
            "user" => given.user = value,
            "dbname" => given.dbname = value,
            "sslmode" => given.sslmode = value,
            "sslrootcert" => given.sslrootcert = value,
            "connect_timeout" => given.connect_timeout = value,
            "application_name" => given.application_name = value,
            "keepalives" => given.keepalives = value,
            "keepalives_idle" => given.keepalives_idle = value,
            "keepalives_interval" => given.keepalives_interval = value,
            "keepalives_count" => given.keepalives_count = value,
            "tcp_user_timeout" => given.tcp_user_timeout = value,
            "options" => given.options = value,
            _ => unreachable!("every name in PARAMS is matched"),
        }
    }
    Ok(kept)
}

fn unknown_after_password() -> String {
    "the url has an unknown query parameter, not shown as it may be a piece of the \
     password: percent-encode '&', '?' and '@' in the password (%26, %3F, %40)"
        .to_owned()
}

/// The environment and the defaults fill what the url left out; then the client config.
fn finish(
    mut given: Given,
    env: &dyn Fn(&str) -> Option<String>,
    local: &Local,
    display: String,
) -> Result<Target, String> {
    let env = |name: &str| nonempty(env(name));
    let mut config = postgres::Config::new();

    // Hosts and ports.
    let default_host = if local.socket_dir {
        DEFAULT_SOCKET_DIR
    } else {
        "localhost"
    };
    let hosts: Vec<String> = given
        .hosts
        .take()
        .or_else(|| env("PGHOST").map(|v| v.split(',').map(str::to_owned).collect()))
        .unwrap_or_default()
        .into_iter()
        .map(|h| {
            if h.is_empty() {
                default_host.to_owned()
            } else {
                h
            }
        })
        .collect();
    let hosts = if hosts.is_empty() {
        vec![default_host.to_owned()]
    } else {
        hosts
    };
    let ports = match given.ports.take() {
        Some(ports) => ports,
        None => match env("PGPORT") {
            Some(v) => v
                .split(',')
                .map(parse_port)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("PGPORT: {e}"))?,
            None => vec![None],
        },
    };
    if ports.len() != 1 && ports.len() != hosts.len() {
        return Err(format!(
            "{} hosts but {} ports: give one port for all or one per host",
            hosts.len(),
            ports.len()
        ));
    }
    let ports: Vec<u16> = (0..hosts.len())
        .map(|i| ports[if ports.len() == 1 { 0 } else { i }].unwrap_or(DEFAULT_PORT))
        .collect();
    for (host, port) in hosts.iter().zip(&ports) {
        if host.contains('\0') {
            return Err("a host name holds a NUL byte".to_owned());
        }
        config.host(host);
        config.port(*port);
    }

    // Who, where, and the secret.
    let user = given
        .user
        .take()
        .or_else(|| env("PGUSER"))
        .or_else(|| local.os_user.clone())
        .ok_or("no user name: give one in the url (postgresql://user@host/db) or PGUSER")?;
    let dbname = given
        .dbname
        .take()
        .or_else(|| env("PGDATABASE"))
        .unwrap_or_else(|| user.clone());
    config.user(&user);
    config.dbname(&dbname);
    if let Some(password) = given
        .password
        .take()
        .or_else(|| env("PGPASSWORD").map(String::into_bytes))
    {
        config.password(password);
    }
    if let Some(options) = given.options.take().or_else(|| env("PGOPTIONS")) {
        config.options(&options);
    }
    let application_name = given.application_name.take().or_else(|| env("PGAPPNAME"));

    // Time bounds and keepalives.
    let connect_timeout = match from(given.connect_timeout.take(), "PGCONNECT_TIMEOUT", &env) {
        None => Some(DEFAULT_CONNECT_TIMEOUT),
        Some((v, source)) => match v.trim().parse::<i64>() {
            // As libpq: 0 (or less) waits forever, and less than 2 s is 2 s.
            Ok(s) if s <= 0 => None,
            Ok(s) => Some(Duration::from_secs(s.max(2).unsigned_abs())),
            Err(_) => {
                return Err(format!(
                    "connect_timeout{source} must be a whole number of seconds, not {v:?}"
                ))
            }
        },
    };
    if let Some(t) = connect_timeout {
        config.connect_timeout(t);
    }
    let keepalives = match given.keepalives.as_deref() {
        None => true,
        Some(v) => match v.trim().parse::<i64>() {
            Ok(n) => n != 0,
            Err(_) => return Err(format!("keepalives must be 0 or 1, not {v:?}")),
        },
    };
    config.keepalives(keepalives);
    let idle = seconds(&given.keepalives_idle, "keepalives_idle")?.unwrap_or(KEEPALIVES_IDLE);
    config.keepalives_idle(idle);
    let interval =
        seconds(&given.keepalives_interval, "keepalives_interval")?.unwrap_or(KEEPALIVES_INTERVAL);
    config.keepalives_interval(interval);
    let count = match given.keepalives_count.as_deref() {
        None => KEEPALIVES_COUNT,
        Some(v) => match v.trim().parse::<u32>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "keepalives_count must be a positive whole number, not {v:?}"
                ))
            }
        },
    };
    config.keepalives_retries(count);
    // Keepalives notice a peer gone silent only while nothing is in flight: data sent
    // and never acknowledged (a statement, or the answer to a ping, to a server cut off)
    // is retransmitted for the kernel's time instead, about 15 minutes. The default
    // bounds that by the keepalives' own time, so that a session is given up as soon
    // either way; with keepalives off, the kernel's default stays. (Set, it also ends
    // a quiet connection whose probes go unanswered for that long, whatever their
    // count: the default is the same time.) As libpq: milliseconds, an int, and 0 or
    // less for the kernel's default. The kernel takes at most `i32::MAX` ms.
    let most = Duration::from_millis(i32::MAX.unsigned_abs().into());
    let user_timeout = match given.tcp_user_timeout.as_deref() {
        None => keepalives.then(|| {
            idle.saturating_add(interval.saturating_mul(count))
                .min(most)
        }),
        Some(v) => match v.trim().parse::<i32>() {
            Ok(ms) if ms <= 0 => None,
            Ok(ms) => Some(Duration::from_millis(ms.unsigned_abs().into())),
            Err(_) => {
                return Err(format!(
                    "tcp_user_timeout must be a whole number of milliseconds (at most \
                     {}), not {v:?}",
                    i32::MAX
                ))
            }
        },
    };
    if let Some(t) = user_timeout {
        config.tcp_user_timeout(t);
    }

    // TLS. The server takes none on a unix socket, and libpq asks for none there.
    let all_unix = hosts.iter().all(|h| h.starts_with('/'));
    let (mode, check) = tls_plan(
        from(given.sslmode.take(), "PGSSLMODE", &env),
        from(given.sslrootcert.take(), "PGSSLROOTCERT", &env),
        all_unix,
        local,
    )?;
    config.ssl_mode(mode);
    let tls = tls_client(check)?;

    let effective = effective(&user, &hosts, &ports, &dbname);
    Ok(Target {
        config,
        tls,
        connect_timeout,
        hosts: hosts.len(),
        application_name,
        display,
        effective,
    })
}

/// A value from the url, else from the environment variable `var`, with where it came
/// from as a suffix for messages (" (from PGSSLMODE)", or "" for the url).
fn from(
    given: Option<String>,
    var: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<(String, String)> {
    match given {
        Some(v) => Some((v, String::new())),
        None => env(var).map(|v| (v, format!(" (from {var})"))),
    }
}

/// A keepalive duration: a positive whole number of seconds.
fn seconds(value: &Option<String>, name: &str) -> Result<Option<Duration>, String> {
    match value.as_deref() {
        None => Ok(None),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(s) if s > 0 => Ok(Some(Duration::from_secs(s))),
            _ => Err(format!(
                "{name} must be a positive whole number of seconds, not {v:?}"
            )),
        },
    }
}

/// How a server's certificate is checked.
enum Check {
    /// Not at all (`require`, `prefer` without roots): TLS against eavesdroppers only.
    Nothing,
    /// Chained to one of the roots, whatever name it is for (`verify-ca`).
    Chain(RootCertStore),
    /// Chained to one of the roots and for the host's name (`verify-full`).
    ChainAndName(RootCertStore),
}

/// The client's `SslMode` and certificate check for a `sslmode` and `sslrootcert`, as
/// libpq decides them; no roots are read when no TLS is to be used (`no_tls`, or
/// `sslmode=disable`).
fn tls_plan(
    sslmode: Option<(String, String)>,
    sslrootcert: Option<(String, String)>,
    no_tls: bool,
    local: &Local,
) -> Result<(SslMode, Check), String> {
    let system = sslrootcert.as_ref().is_some_and(|(v, _)| v == "system");
    let (mode, mode_source) = match sslmode {
        Some((mode, source)) => (mode, source),
        // libpq: the system's roots are for verify-full only, which they make the default.
        None if system => ("verify-full".to_owned(), String::new()),
        None => ("prefer".to_owned(), String::new()),
    };
    let known = [
        "disable",
        "allow",
        "prefer",
        "require",
        "verify-ca",
        "verify-full",
    ];
    if !known.contains(&mode.as_str()) {
        return Err(format!(
            "invalid sslmode {mode:?}{mode_source}: one of {}",
            known.join(", ")
        ));
    }
    if system && mode != "verify-full" {
        return Err(format!(
            "sslmode {mode:?}{mode_source} may not be used with sslrootcert=system (use \
             \"verify-full\")"
        ));
    }
    if no_tls || mode == "disable" {
        return Ok((SslMode::Disable, Check::Nothing));
    }
    // Roots: sslrootcert, else ~/.postgresql/root.crt if present. With roots, libpq checks
    // the chain even for prefer and require.
    let default_file = local
        .home
        .as_ref()
        .map(|home| home.join(".postgresql").join("root.crt"))
        .filter(|path| path.is_file());
    let roots = match (&sslrootcert, &default_file) {
        (Some((v, _)), _) if v == "system" => Some(system_roots()?),
        (Some((v, source)), _) => Some(file_roots(Path::new(v), source)?),
        (None, Some(path)) => Some(file_roots(path, "")?),
        (None, None) => None,
    };
    Ok(match (mode.as_str(), roots) {
        ("allow" | "prefer", None) => (SslMode::Prefer, Check::Nothing),
        ("allow" | "prefer", Some(roots)) => (SslMode::Prefer, Check::Chain(roots)),
        ("require", None) => (SslMode::Require, Check::Nothing),
        ("require" | "verify-ca", Some(roots)) => (SslMode::Require, Check::Chain(roots)),
        ("verify-full", Some(roots)) => (SslMode::Require, Check::ChainAndName(roots)),
        (_, None) => {
            return Err(format!(
                "sslmode {mode:?}{mode_source} needs the server's root certificate: give \
                 sslrootcert=/path/to/root.crt, or sslrootcert=system for the system's \
                 roots (~/.postgresql/root.crt does not exist)"
            ))
        }
        _ => unreachable!("every sslmode is matched"),
    })
}

fn file_roots(path: &Path, source: &str) -> Result<RootCertStore, String> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read sslrootcert {shown}{source}: {e}"))?;
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "sslrootcert {shown}{source} holds no usable PEM certificate"
        ));
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map_or(String::new(), |e| format!(" ({e})"));
        return Err(format!(
            "sslrootcert=system: no root certificate found on this system{why}"
        ));
    }
    Ok(roots)
}

/// The TLS client: ring's algorithms (whatever other provider the process may have
/// installed), and the check.
fn tls_client(check: Check) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?;
    let config = match check {
        Check::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
        Check::Chain(roots) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly {
                roots: Arc::new(roots),
                provider,
            }))
            .with_no_client_auth(),
        Check::ChainAndName(roots) => builder.with_root_certificates(roots).with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// `sslmode=require` (and `prefer`) without roots: any certificate is taken, as libpq
/// does; the handshake's signatures are still checked, so the server holds its key.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `sslmode=verify-ca`: the certificate must chain to one of the roots (and be valid
/// now, for a server), but may be for any name; rustls exposes the chain check alone
/// for such verifiers.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<RootCertStore>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// `postgresql://user@host:port,…/db` of where a connection goes, for errors.
fn effective(user: &str, hosts: &[String], ports: &[u16], dbname: &str) -> String {
    let hosts: Vec<String> = hosts
        .iter()
        .zip(ports)
        .map(|(host, port)| {
            if host.contains(':') && !host.starts_with('/') {
                format!("[{host}]:{port}")
            } else {
                format!("{}:{port}", encode(host))
            }
        })
        .collect();
    format!(
        "postgresql://{}@{}/{}",
        encode(user),
        hosts.join(","),
        encode(dbname)
    )
}

/// Percent-encodes all but RFC 3986's unreserved characters.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-decodes a part that is not secret (so it may be echoed) into UTF-8.
fn decode_str(s: &str, what: &str) -> Result<String, String> {
    let bytes = decode(s).map_err(|()| format!("invalid percent-encoding in {what}: {s:?}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{what} is not UTF-8 once decoded: {s:?}"))
}

fn nonempty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.is_empty())
}

/// The name and home directory of the user this process runs as, from the password
/// database, as libpq finds them.
#[cfg(unix)]
fn os_user_and_home() -> (Option<String>, Option<PathBuf>) {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt;

    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero `passwd` (null pointers, zero ids) is a valid value to be
    // overwritten.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: `geteuid` has no preconditions; `getpwuid_r` writes only into `pwd`, into
    // `buf` (whose length it is given) and into `result`, all live for the call.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::geteuid(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() {
        return (None, None);
    }
    let field = |p: *const libc::c_char| {
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null field of the entry `getpwuid_r` filled points to a
        // NUL-terminated string inside `buf`, which is still alive and unchanged.
        Some(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
    };
    let name = field(pwd.pw_name).and_then(|n| String::from_utf8(n).ok());
    let home = field(pwd.pw_dir).map(|d| PathBuf::from(std::ffi::OsStr::from_bytes(&d)));
    (name.filter(|n| !n.is_empty()), home)
}

#[cfg(not(unix))]
fn os_user_and_home() -> (Option<String>, Option<PathBuf>) {
    (std::env::var("USERNAME").ok(), None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use postgres::config::Host;

    /// A test CA (self-signed, P-256), for `sslrootcert`.
    const CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBijCCATGgAwIBAgIUGeyFIePW3zXU6PvGwloJhthkE1IwCgYIKoZIzj0EAwIw
GjEYMBYGA1UEAwwPY3R4bG9jayB0ZXN0IENBMCAXDTI2MTEyNDA0MTYzMloYDzIx
MjYxMDMxMDQxNjMyWjAaMRgwFgYDVQQDDA9jdHhsb2NrIHRlc3QgQ0EwWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAAQCh2LDX7uQWwPgyhELv9Bl2n0FbyWKRfF7zmFE
cOMmiC3NNR2inLMi6/Kw8gG1GZ3cLvUjADdIzfeFUbPtu0MZo1MwUTAdBgNVHQ4E
FgQUQKhUeWRtApdZ7rJrOFDfnyWn6RkwHwYDVR0jBBgwFoAUQKhUeWRtApdZ7rJr
OFDfnyWn6RkwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiBtoX/K
jG9v00xOrWkxnj2yxvy6EPf1GqLBoWK05GX2+AIgOVopa81hCTAJ9osIVs7h7TYk
Fe9ppwGOGdE7k/KnLos=
-----END CERTIFICATE-----
";

    fn local() -> Local {
        Local {
            os_user: Some("osuser".to_owned()),
            home: None,
            socket_dir: false,
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse(url: &str) -> Result<Target, String> {
        parse_with(url, &no_env, &local())
    }

    fn parse_env(url: &str, vars: &[(&str, &str)]) -> Result<Target, String> {
        let env = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        parse_with(url, &env, &local())
    }

    fn err(url: &str) -> String {
        parse(url).expect_err(url)
    }

    fn tcp(t: &Target) -> Vec<String> {
        t.config
            .get_hosts()
            .iter()
            .map(|h| match h {
                Host::Tcp(h) => h.clone(),
                Host::Unix(p) => format!("unix:{}", p.display()),
            })
            .collect()
    }

    /// A file of its own under the temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &str) -> TempFile {
            let path =
                std::env::temp_dir().join(format!("ctxlock-pg-url-{}-{name}", std::process::id()));
            std::fs::write(&path, contents).unwrap();
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn full_form() {
        let t = parse(
            "postgresql://alice:s3cret@db.example:6543/orders?sslmode=disable&application_name=app1",
        )
        .unwrap();
        assert_eq!(tcp(&t), ["db.example"]);
        assert_eq!(t.config.get_ports(), [6543]);
        assert_eq!(t.config.get_user(), Some("alice"));
        assert_eq!(t.config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(t.config.get_dbname(), Some("orders"));
        assert_eq!(t.config.get_ssl_mode(), SslMode::Disable);
        assert_eq!(
            t.display(),
            "postgresql://alice@db.example:6543/orders?sslmode=disable&application_name=app1"
        );
        assert_eq!(t.application_name_or("dflt"), "app1");
        assert_eq!(t.effective, "postgresql://alice@db.example:6543/orders");
    }

    #[test]
    fn a_target_is_shared_between_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Target>();
    }

    #[test]
    fn a_nul_is_refused() {
        assert!(err("postgresql://h/d\0b").contains("NUL"));
        assert!(!err("postgresql://u:p\0w@h/db").contains("p\0w"));
    }

    #[test]
    fn short_scheme_and_defaults() {
        let t = parse("postgres://").unwrap();
        assert_eq!(tcp(&t), ["localhost"]);
        assert_eq!(t.config.get_ports(), [5432]);
        assert_eq!(t.config.get_user(), Some("osuser"));
        assert_eq!(t.config.get_dbname(), Some("osuser"));
        assert_eq!(t.config.get_password(), None);
        assert_eq!(t.config.get_ssl_mode(), SslMode::Prefer);
        assert_eq!(t.connect_timeout, Some(Duration::from_secs(10)));
        assert_eq!(t.display(), "postgres://");
        assert_eq!(t.application_name_or("dflt"), "dflt");
        // The default database is the user's, wherever the user came from.
        let t = parse("postgresql://bob@").unwrap();
        assert_eq!(t.config.get_dbname(), Some("bob"));
        let t = parse("postgresql:///db").unwrap();
        assert_eq!(tcp(&t), ["localhost"]);
        assert_eq!(t.config.get_dbname(), Some("db"));
    }

    #[test]
    fn default_host_is_the_socket_dir_when_it_exists() {
        let with_dir = Local {
            socket_dir: true,
            ..local()
        };
        let t = parse_with("postgresql://u@/db", &no_env, &with_dir).unwrap();
        assert_eq!(tcp(&t), ["unix:/var/run/postgresql"]);
        // No TLS over a unix socket, whatever sslmode says, and no roots read for it.
        let t = parse_with(
            "postgresql:///db?sslmode=verify-full&sslrootcert=/nonexistent/ctxlock.crt",
            &no_env,
            &with_dir,
        )
        .unwrap();
        assert_eq!(t.config.get_ssl_mode(), SslMode::Disable);
    }

    #[test]
    fn no_user_anywhere() {
        let nobody = Local {
            os_user: None,
            ..local()
        };
        let e = parse_with("postgresql://h/db", &no_env, &nobody).unwrap_err();
        assert!(e.contains("PGUSER"), "{e}");
    }

    #[test]
    fn environment_fills_the_gaps() {
        let vars = [
            ("PGHOST", "envhost"),
            ("PGPORT", "7777"),
            ("PGUSER", "envuser"),
            ("PGPASSWORD", "envpw"),
            ("PGDATABASE", "envdb"),
            ("PGSSLMODE", "disable"),
            ("PGCONNECT_TIMEOUT", "3"),
            ("PGAPPNAME", "envapp"),
            ("PGOPTIONS", "-c x=1"),
        ];
        let t = parse_env("postgresql://", &vars).unwrap();
        assert_eq!(tcp(&t), ["envhost"]);
        assert_eq!(t.config.get_ports(), [7777]);
        assert_eq!(t.config.get_user(), Some("envuser"));
        assert_eq!(t.config.get_password(), Some(&b"envpw"[..]));
        assert_eq!(t.config.get_dbname(), Some("envdb"));
        assert_eq!(t.config.get_ssl_mode(), SslMode::Disable);
        assert_eq!(t.connect_timeout, Some(Duration::from_secs(3)));
        assert_eq!(t.application_name_or("dflt"), "envapp");
        assert_eq!(t.config.get_options(), Some("-c x=1"));
        assert_eq!(t.display(), "postgresql://");
        assert!(!t.effective.contains("envpw"));

        // The url wins over the environment.
        let t = parse_env(
            "postgresql://u:pw@h:1/d?sslmode=require&connect_timeout=4&application_name=a",
            &vars,
        )
        .unwrap();
        assert_eq!(tcp(&t), ["h"]);
        assert_eq!(t.config.get_ports(), [1]);
        assert_eq!(t.config.get_user(), Some("u"));
        assert_eq!(t.config.get_password(), Some(&b"pw"[..]));
        assert_eq!(t.config.get_dbname(), Some("d"));
        assert_eq!(t.config.get_ssl_mode(), SslMode::Require);
        assert_eq!(t.connect_timeout, Some(Duration::from_secs(4)));
        assert_eq!(t.application_name_or("dflt"), "a");

        // Empty variables count as unset; PGUSER names the default database too.
        let t = parse_env("postgresql://", &[("PGHOST", ""), ("PGUSER", "pu")]).unwrap();
        assert_eq!(tcp(&t), ["localhost"]);
        assert_eq!(t.config.get_dbname(), Some("pu"));
        // PGHOST may be a unix socket directory.
        let t = parse_env("postgresql://", &[("PGHOST", "/tmp")]).unwrap();
        assert_eq!(tcp(&t), ["unix:/tmp"]);
    }

    #[test]
    fn bad_environment_values_are_named() {
        let e = parse_env("postgresql://h", &[("PGPORT", "x")]).unwrap_err();
        assert!(e.contains("PGPORT") && e.contains("\"x\""), "{e}");
        let e = parse_env("postgresql://h", &[("PGSSLMODE", "maybe")]).unwrap_err();
        assert!(e.contains("PGSSLMODE") && e.contains("maybe"), "{e}");
        let e = parse_env("postgresql://h", &[("PGCONNECT_TIMEOUT", "soon")]).unwrap_err();
        assert!(e.contains("PGCONNECT_TIMEOUT") && e.contains("soon"), "{e}");
    }

    #[test]
    fn ipv6_and_many_hosts() {
        let t = parse("postgresql://[::1]:5433/db").unwrap();
        assert_eq!(tcp(&t), ["::1"]);
        assert_eq!(t.config.get_ports(), [5433]);
        assert_eq!(t.effective, "postgresql://osuser@[::1]:5433/db");
        let t = parse("postgresql://[2001:db8::7]/db").unwrap();
        assert_eq!(tcp(&t), ["2001:db8::7"]);
        assert_eq!(t.config.get_ports(), [5432]);

        let t = parse("postgresql://a:1,[::1]:2,c/db").unwrap();
        assert_eq!(tcp(&t), ["a", "::1", "c"]);
        assert_eq!(t.config.get_ports(), [1, 2, 5432]);
        assert_eq!(t.display(), "postgresql://a:1,[::1]:2,c/db");
        let t = parse("postgresql:///db?host=a,b&port=5,6").unwrap();
        assert_eq!(tcp(&t), ["a", "b"]);
        assert_eq!(t.config.get_ports(), [5, 6]);
        let t = parse("postgresql://a,b/db?port=9").unwrap();
        assert_eq!(t.config.get_ports(), [9, 9]);

        assert!(err("postgresql://a,b,c/db?port=1,2").contains("3 hosts but 2 ports"));
        assert!(err("postgresql://[::1/db").contains("closing ']'"));
        assert!(err("postgresql://[::1]x/db").contains("\"x\""));
    }

    #[test]
    fn percent_encoding_everywhere() {
        let t = parse(
            "postgresql://al%40ice:p%40ss%2Fw%3Ard%26@%2Ftmp%2Fpg%20dir:5000/my%20db?application_name=a%26b",
        )
        .unwrap();
        assert_eq!(t.config.get_user(), Some("al@ice"));
        assert_eq!(t.config.get_password(), Some(&b"p@ss/w:rd&"[..]));
        assert_eq!(tcp(&t), ["unix:/tmp/pg dir"]);
        assert_eq!(t.config.get_ports(), [5000]);
        assert_eq!(t.config.get_dbname(), Some("my db"));
        assert_eq!(t.application_name_or(""), "a&b");
        assert_eq!(
            t.display(),
            "postgresql://al%40ice@%2Ftmp%2Fpg%20dir:5000/my%20db?application_name=a%26b"
        );
        assert_eq!(
            t.effective,
            "postgresql://al%40ice@%2Ftmp%2Fpg%20dir:5000/my%20db"
        );
        // A password need not be UTF-8.
        let t = parse("postgresql://u:%FF%FE@h").unwrap();
        assert_eq!(t.config.get_password(), Some(&[0xFF, 0xFE][..]));

        let e = err("postgresql://h/d%zzb");
        assert!(e.contains("database name") && e.contains("d%zzb"), "{e}");
        assert!(err("postgresql://h/d%0").contains("percent-encoding"));
        assert!(err("postgresql://h/d%00").contains("percent-encoding"));
        assert!(err("postgresql://h/%FF").contains("UTF-8"));
    }

    #[test]
    fn query_parameters() {
        let t = parse(
            "postgresql://h1/db1?host=%2Fsock&port=7&user=u2&dbname=d2&options=-c%20x%3Dy\
             &keepalives_idle=9&keepalives_interval=4&keepalives_count=6&tcp_user_timeout=2500",
        )
        .unwrap();
        assert_eq!(tcp(&t), ["unix:/sock"]);
        assert_eq!(t.config.get_ports(), [7]);
        assert_eq!(t.config.get_user(), Some("u2"));
        assert_eq!(t.config.get_dbname(), Some("d2"));
        assert_eq!(t.config.get_options(), Some("-c x=y"));
        assert!(t.config.get_keepalives());
        assert_eq!(t.config.get_keepalives_idle(), Duration::from_secs(9));
        assert_eq!(
            t.config.get_keepalives_interval(),
            Some(Duration::from_secs(4))
        );
        assert_eq!(t.config.get_keepalives_retries(), Some(6));
        assert_eq!(
            t.config.get_tcp_user_timeout(),
            Some(&Duration::from_millis(2500))
        );
        // A plain path works for host= too, and a later piece overrides an earlier one.
        let t = parse("postgresql:///db?host=/a&host=/b&user=x&user=").unwrap();
        assert_eq!(tcp(&t), ["unix:/b"]);
        assert_eq!(t.config.get_user(), Some("osuser"));
        // An '@' in a query value (Azure's user@server) is fine.
        let t = parse("postgresql://h/db?user=admin@server").unwrap();
        assert_eq!(t.config.get_user(), Some("admin@server"));
    }

    #[test]
    fn keepalives_and_timeouts() {
        let t = parse("postgresql://h").unwrap();
        assert!(t.config.get_keepalives());
        assert_eq!(t.config.get_keepalives_idle(), Duration::from_secs(5));
        assert_eq!(
            t.config.get_keepalives_interval(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(t.config.get_keepalives_retries(), Some(3));
        // Unacknowledged data is given up on in the keepalives' time: 5 + 3 x 2 s.
        let user_timeout = |url: &str| parse(url).unwrap().config.get_tcp_user_timeout().copied();
        let ms = |ms: u64| Some(Duration::from_millis(ms));
        assert_eq!(
            t.config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(11))
        );
        assert_eq!(
            user_timeout("postgresql://h?keepalives_idle=20&keepalives_count=5"),
            ms(30_000)
        );
        // Without keepalives, or with 0 (or less), the kernel's default.
        for url in [
            "postgresql://h?keepalives=0",
            "postgresql://h?tcp_user_timeout=0",
            "postgresql://h?tcp_user_timeout=-1",
        ] {
            assert_eq!(user_timeout(url), None, "{url}");
        }
        // Keepalives too long for the kernel's limit: the limit, not an overflow.
        assert_eq!(
            user_timeout(
                "postgresql://h?keepalives_interval=9223372036854775807&keepalives_count=9"
            ),
            ms(2_147_483_647)
        );
        assert_eq!(
            user_timeout("postgresql://h?keepalives=0&tcp_user_timeout=700"),
            ms(700)
        );
        assert_eq!(
            t.config.get_connect_timeout(),
            Some(&Duration::from_secs(10))
        );
        assert!(!parse("postgresql://h?keepalives=0")
            .unwrap()
            .config
            .get_keepalives());
        assert!(parse("postgresql://h?keepalives=1")
            .unwrap()
            .config
            .get_keepalives());

        let t = parse("postgresql://h?connect_timeout=0").unwrap();
        assert_eq!(t.connect_timeout, None);
        assert_eq!(t.limit(), None);
        let t = parse("postgresql://h?connect_timeout=1").unwrap();
        assert_eq!(t.connect_timeout, Some(Duration::from_secs(2)));
        let t = parse("postgresql://a,b,c?connect_timeout=5").unwrap();
        assert_eq!(t.limit(), Some(Duration::from_secs(15)));

        for (url, name) in [
            ("postgresql://h?connect_timeout=1.5", "connect_timeout"),
            ("postgresql://h?keepalives=yes", "keepalives"),
            ("postgresql://h?keepalives_idle=0", "keepalives_idle"),
            (
                "postgresql://h?keepalives_interval=-1",
                "keepalives_interval",
            ),
            ("postgresql://h?keepalives_count=x", "keepalives_count"),
            ("postgresql://h?tcp_user_timeout=1.5", "tcp_user_timeout"),
            (
                "postgresql://h?tcp_user_timeout=2147483648",
                "tcp_user_timeout",
            ),
        ] {
            let e = err(url);
            assert!(e.starts_with(name), "{url}: {e}");
        }
    }

    #[test]
    fn bad_ports() {
        for (url, port) in [
            ("postgresql://h:abc/db", "abc"),
            ("postgresql://h:0/db", "0"),
            ("postgresql://h:70000/db", "70000"),
            ("postgresql://h:+5/db", "+5"),
            ("postgresql://h/db?port=x", "x"),
            ("postgresql://h/db?port=1,y", "y"),
            ("postgresql://[::1]:-1/db", "-1"),
        ] {
            let e = err(url);
            assert!(e.contains(&format!("invalid port {port:?}")), "{url}: {e}");
        }
    }

    #[test]
    fn unknown_and_unsupported_parameters_are_named() {
        let e = err("postgresql://u:pw@h/db?sslmod=require");
        assert!(e.contains("\"sslmod\"") && e.contains("unknown"), "{e}");
        let e = err("postgresql://h/db?sslcert=/c.pem");
        assert!(
            e.contains("\"sslcert\"") && e.contains("not supported"),
            "{e}"
        );
        let e = err("postgresql://h/db?sslmode");
        assert!(e.contains("\"sslmode\"") && e.contains("'='"), "{e}");
        let e = err("postgresql://h/db?sslmode=sometimes");
        assert!(e.contains("sslmode") && e.contains("sometimes"), "{e}");
    }

    #[test]
    fn not_a_postgresql_url() {
        for url in ["mysql://u:pw@h/db", "postgresql:/h", "Postgresql://h", ""] {
            let e = err(url);
            assert!(
                e.contains("'postgresql://'") && !e.contains("pw"),
                "{url}: {e}"
            );
        }
    }

    #[test]
    fn the_password_is_never_shown() {
        // Every form a password may take, each with a parse that works.
        for (url, shown) in [
            ("postgresql://u:pw1@h/db", "postgresql://u@h/db"),
            ("postgresql://:pw1@h/db", "postgresql://h/db"),
            ("postgresql://u:@h/db", "postgresql://u@h/db"),
            (
                "postgresql://u:pw1@h/db?password=pw2",
                "postgresql://u@h/db",
            ),
            (
                "postgresql://h/db?sslmode=disable&password=pw1&application_name=x",
                "postgresql://h/db?sslmode=disable&application_name=x",
            ),
            ("postgresql://h?password=pw1", "postgresql://h"),
        ] {
            let t = parse(url).unwrap();
            assert_eq!(t.display(), shown);
            assert!(!format!("{t:?}").contains("pw"));
            assert!(!t.effective.contains("pw"));
        }
    }

    #[test]
    fn errors_never_show_the_password() {
        let bad_pem = TempFile::new("bad.pem", "not a certificate\n");
        let bad_pem = format!("{}", bad_pem.0.display());
        // Each url holds a password made of pieces pwA, pwB…; no error may show any.
        let urls = [
            // Every error path of a well-formed url.
            "postgresql://u:pwA@h:abc/db".to_owned(),
            "postgresql://u:pwA@h:0/db".to_owned(),
            "postgresql://u:pwA@[::1/db".to_owned(),
            "postgresql://u:pwA@[::1]x/db".to_owned(),
            "postgresql://u:pwA@h/d%zz".to_owned(),
            "postgresql://u:pwA@h/%FF".to_owned(),
            "postgresql://u%zz:pwA@h/db".to_owned(),
            "postgresql://u:pwA%zz@h/db".to_owned(),
            "postgresql://u:pwA@h%zz/db".to_owned(),
            "postgresql://u:pwA@h/db?bogus=1".to_owned(),
            "postgresql://u:pwA@h/db?sslcert=x".to_owned(),
            "postgresql://u:pwA@h/db?sslmode".to_owned(),
            "postgresql://u:pwA@h/db?sslmode=bad".to_owned(),
            "postgresql://u:pwA@h/db?sslmode=verify-ca".to_owned(),
            "postgresql://u:pwA@h/db?sslmode=require&sslrootcert=system".to_owned(),
            "postgresql://u:pwA@h/db?sslrootcert=/nonexistent/ctxlock/root.crt".to_owned(),
            format!("postgresql://u:pwA@h/db?sslrootcert={bad_pem}"),
            "postgresql://u:pwA@h/db?port=x".to_owned(),
            "postgresql://u:pwA@a,b,c/db?port=1,2".to_owned(),
            "postgresql://u:pwA@h/db?connect_timeout=x".to_owned(),
            "postgresql://u:pwA@h/db?keepalives=x".to_owned(),
            "postgresql://u:pwA@h/db?keepalives_idle=x".to_owned(),
            "postgresql://u:pwA@h/db?keepalives_interval=x".to_owned(),
            "postgresql://u:pwA@h/db?keepalives_count=x".to_owned(),
            "postgresql://u:pwA@h/db?password=pwB%zz".to_owned(),
            "postgresql://h/db?password=pwA&sslmode=bad".to_owned(),
            "mysql://u:pwA@h/db".to_owned(),
            // A password with unescaped reserved characters: whatever the parser makes
            // of it, it shows none of its pieces.
            "postgresql://u:pwA/pwB@h/db".to_owned(),
            "postgresql://u:pwA?pwB@h/db".to_owned(),
            "postgresql://u:pwA?pwB=1@h/db".to_owned(),
            "postgresql://u:/pwA@h/db".to_owned(),
            "postgresql://u:pwA@pwB/pwC@h/db".to_owned(),
            "postgresql://u:pwA@pwB?pwC@h/db".to_owned(),
            "postgresql://u:pwA@pwB?pwC=1@h/db".to_owned(),
            "postgresql://h/db?password=pwA&pwB".to_owned(),
            "postgresql://h/db?password=pwA&pwB=1".to_owned(),
            "postgresql://h/db?password=pwA&pw%zzB=1".to_owned(),
            "postgresql://h/db?password=pwA&sslcert=pwB".to_owned(),
        ];
        for url in &urls {
            let e = parse(url).expect_err(url);
            assert!(!e.contains("pw"), "{url}: {e}");
        }
        // PGPASSWORD, likewise.
        let e = parse_env("postgresql://h/db?sslmode=bad", &[("PGPASSWORD", "pwA")]).unwrap_err();
        assert!(!e.contains("pw"), "{e}");
    }

    #[test]
    fn misplaced_at_is_explained() {
        let e = err("postgresql://u:pa/ss@h/db");
        assert!(e.contains("percent-encode '@'"), "{e}");
        let e = err("postgresql://h/d@b");
        assert!(e.contains("percent-encode '@'"), "{e}");
    }

    #[test]
    fn tls_modes() {
        let mode = |url: &str| parse(url).unwrap().config.get_ssl_mode();
        assert_eq!(mode("postgresql://h?sslmode=disable"), SslMode::Disable);
        assert_eq!(
            mode("postgresql://h?sslmode=disable&sslrootcert=/nonexistent/ctxlock.crt"),
            SslMode::Disable
        );
        assert_eq!(mode("postgresql://h?sslmode=allow"), SslMode::Prefer);
        assert_eq!(mode("postgresql://h?sslmode=prefer"), SslMode::Prefer);
        assert_eq!(mode("postgresql://h"), SslMode::Prefer);
        assert_eq!(mode("postgresql://h?sslmode=require"), SslMode::Require);

        for m in ["verify-ca", "verify-full"] {
            let e = err(&format!("postgresql://h?sslmode={m}"));
            assert!(e.contains(m) && e.contains("sslrootcert"), "{e}");
        }
        let e = err("postgresql://h?sslmode=require&sslrootcert=system");
        assert!(e.contains("verify-full"), "{e}");
        let e = parse_env(
            "postgresql://h",
            &[("PGSSLROOTCERT", "/nonexistent/ctxlock.crt")],
        )
        .unwrap_err();
        assert!(
            e.contains("/nonexistent/ctxlock.crt") && e.contains("PGSSLROOTCERT"),
            "{e}"
        );

        let ca = TempFile::new("ca.pem", CA_PEM);
        let ca = ca.0.display().to_string();
        for m in ["prefer", "require", "verify-ca", "verify-full"] {
            let t = parse(&format!("postgresql://h?sslmode={m}&sslrootcert={ca}")).unwrap();
            assert_ne!(t.config.get_ssl_mode(), SslMode::Disable);
        }
        // ~/.postgresql/root.crt is the default root file.
        let home = std::env::temp_dir().join(format!("ctxlock-pg-url-home-{}", std::process::id()));
        std::fs::create_dir_all(home.join(".postgresql")).unwrap();
        std::fs::write(home.join(".postgresql/root.crt"), CA_PEM).unwrap();
        let with_home = Local {
            home: Some(home.clone()),
            ..local()
        };
        let t = parse_with("postgresql://h?sslmode=verify-full", &no_env, &with_home);
        std::fs::remove_dir_all(&home).unwrap();
        assert_eq!(t.unwrap().config.get_ssl_mode(), SslMode::Require);

        let pem = TempFile::new("empty.pem", "nothing here\n");
        let e = err(&format!(
            "postgresql://h?sslmode=verify-ca&sslrootcert={}",
            pem.0.display()
        ));
        assert!(e.contains("no usable PEM certificate"), "{e}");
    }

    #[test]
    fn the_system_roots_make_verify_full_the_default() {
        // Only where this machine has roots to load.
        if rustls_native_certs::load_native_certs().certs.is_empty() {
            return;
        }
        let t = parse("postgresql://h?sslrootcert=system").unwrap();
        assert_eq!(t.config.get_ssl_mode(), SslMode::Require);
    }

    #[test]
    fn connect_errors_name_the_target_without_the_password() {
        // Port 1 on the loopback: refused at once on any usual machine.
        let t = parse("postgresql://app:pwA@127.0.0.1:1/db?sslmode=disable").unwrap();
        let Err(e) = t.connect("test") else {
            panic!("connected")
        };
        assert!(
            e.starts_with("cannot connect to postgresql://app@127.0.0.1:1/db: "),
            "{e}"
        );
        assert!(!e.contains("pw"), "{e}");
    }

    #[test]
    fn a_silent_server_is_bounded_by_connect_timeout() {
        // Accepts (the kernel does) and never answers the startup message.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let t = parse(&format!(
            "postgresql://u:pwA@127.0.0.1:{port}/db?sslmode=disable&connect_timeout=2"
        ))
        .unwrap();
        let start = std::time::Instant::now();
        let Err(e) = t.connect("test") else {
            panic!("connected")
        };
        let took = start.elapsed();
        assert!(e.contains("no answer within 2 s"), "{e}");
        assert!(!e.contains("pw"), "{e}");
        assert!(
            took >= Duration::from_secs(2) && took < Duration::from_secs(5),
            "{took:?}"
        );
        drop(listener);
    }

    /// Against a real server: `CTXLOCK_PG_URL=postgresql://… cargo test --lib pg_url -- --ignored`.
    #[test]
    #[ignore = "needs a PostgreSQL server (CTXLOCK_PG_URL)"]
    fn live_server() {
        let url = std::env::var("CTXLOCK_PG_URL").expect("CTXLOCK_PG_URL");
        let t = Target::parse(&url, &|k| std::env::var(k).ok()).unwrap();
        let mut client = t.connect(&t.application_name_or("ctxlock-test")).unwrap();
        let row = client.query_one("SHOW application_name", &[]).unwrap();
        let app: String = row.get(0);
        assert_eq!(app, t.application_name_or("ctxlock-test"));
        // CTXLOCK_PG_SSL=on/off: whether the connection must be over TLS.
        if let Ok(want) = std::env::var("CTXLOCK_PG_SSL") {
            let row = client
                .query_one(
                    "SELECT coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false)",
                    &[],
                )
                .unwrap();
            let ssl: bool = row.get(0);
            assert_eq!(ssl, want == "on");
        }

        // A sleep cancelled from another thread ends with query_canceled.
        let token = client.cancel_token();
        let sleeper = std::thread::spawn(move || client.batch_execute("SELECT pg_sleep(30)"));
        std::thread::sleep(Duration::from_millis(500));
        t.cancel(&token).unwrap();
        let e = sleeper.join().unwrap().unwrap_err();
        assert_eq!(e.code(), Some(&postgres::error::SqlState::QUERY_CANCELED));
    }
}
