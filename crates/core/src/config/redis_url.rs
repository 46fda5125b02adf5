//! `state.url`: which Redis deployment it names (one server, a cluster,
//! a Sentinel service), read and checked before anything connects.

/// The scheme of a cluster URL.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";
/// The scheme of a Sentinel URL.
pub const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// A Redis deployment named by `state.url`, before connecting.
#[derive(Debug, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server: the URL as given.
    Single(String),
    /// Seed nodes, each as a `redis://` URL carrying the credentials.
    Cluster(Vec<String>),
    /// Sentinel nodes as `redis://` URLs, the service name, and the data
    /// nodes' `redis://` settings (credentials and database, no host).
    Sentinel {
        /// The sentinels to ask, as `redis://host:port`.
        sentinels: Vec<String>,
        /// The service (master name) they watch.
        service: String,
        /// Credentials and database for the primary, as a `redis://` URL.
        node: String,
    },
}

impl RedisTarget {
    /// Reads `state.url`; the error names what is wrong with it.
    pub fn parse(url: &str) -> Result<Self, String> {
        if let Some(rest) = url.strip_prefix(CLUSTER_SCHEME) {
            let (auth, hosts, path) = split(rest)?;
            if !path.is_empty() {
                return Err(format!(
                    "a {CLUSTER_SCHEME} URL takes no path (a cluster has one database)"
                ));
            }
            let seeds = hosts.iter().map(|h| format!("redis://{auth}{h}")).collect();
            return Ok(Self::Cluster(seeds));
        }
        if let Some(rest) = url.strip_prefix(SENTINEL_SCHEME) {
            let (auth, hosts, path) = split(rest)?;
            let (service, db) = path.split_once('/').unwrap_or((path, ""));
            if service.is_empty() {
                return Err(format!(
                    "a {SENTINEL_SCHEME} URL names its service: {SENTINEL_SCHEME}h1:p1,h2:p2/service"
                ));
            }
            if !db.is_empty() && db.parse::<u32>().is_err() {
                return Err(format!(
                    "the database after the service must be a number, not {db:?}"
                ));
            }
            return Ok(Self::Sentinel {
                sentinels: hosts.iter().map(|h| format!("redis://{h}")).collect(),
                service: service.to_string(),
                node: format!("redis://{auth}localhost/{db}"),
            });
        }
        if url.starts_with("redis://")
            || url.starts_with("redis+unix://")
            || url.starts_with("unix://")
        {
            return Ok(Self::Single(url.to_string()));
        }
        Err(format!(
            "must be a redis://, unix://, {CLUSTER_SCHEME} or {SENTINEL_SCHEME} URL"
        ))
    }
}

/// `[user:password@]h1:p1,h2:p2[/path]` → (`user:password@` or "", hosts, path).
fn split(rest: &str) -> Result<(&str, Vec<&str>, &str), String> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path = path.trim_end_matches('/');
    let (auth, hosts) = match authority.rfind('@') {
        Some(at) => (&authority[..=at], &authority[at + 1..]),
        None => ("", authority),
    };
    let hosts: Vec<&str> = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    if hosts.is_empty() {
        return Err("names no host: list them as h1:p1,h2:p2".into());
    }
    if let Some(bad) = hosts.iter().find(|h| !h.contains(':')) {
        return Err(format!("host {bad:?} needs its port (host:port)"));
    }
    Ok((auth, hosts, path))
}

#[cfg(test)]
mod tests {
    use super::RedisTarget as Target;

    #[test]
    fn urls_name_their_deployment() {
        assert_eq!(
            Target::parse("redis://127.0.0.1:6379/0"),
            Ok(Target::Single("redis://127.0.0.1:6379/0".into()))
        );
        assert_eq!(
            Target::parse("redis+cluster://u:p%40ss@a:1,b:2/"),
            Ok(Target::Cluster(vec![
                "redis://u:p%40ss@a:1".into(),
                "redis://u:p%40ss@b:2".into()
            ]))
        );
        assert_eq!(
            Target::parse("redis+sentinel://:pw@s1:26379,s2:26379/mymaster/2"),
            Ok(Target::Sentinel {
                sentinels: vec!["redis://s1:26379".into(), "redis://s2:26379".into()],
                service: "mymaster".into(),
                node: "redis://:pw@localhost/2".into(),
            })
        );
        for bad in [
            "redis+cluster://",
            "redis+cluster://a:1,b/",
            "redis+cluster://a:1/3",
            "redis+sentinel://a:1/",
            "redis+sentinel://a:1/svc/x",
            "http://a:1",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
