//! Network namespaces for tests that cut a node off the network (issue 33): each node of
//! a [`Lab`] runs in a namespace of its own with two veth links to the test's namespace —
//! one it reaches the database (and so the other nodes) through, one the test reaches
//! its API through. [`Lab::cut`] takes the database link down on the test's side: the
//! node's sockets stay open and what it sends is dropped without a word, as in a real
//! partition; [`Lab::heal`] brings it back. Made with iproute2 (`ip netns`, veth), torn
//! down on drop.

use std::process::Command;

/// Where a node lives: its namespace, the address the test reaches its API at, and the
/// address it reaches the database at.
#[derive(Debug, Clone)]
pub struct NodeNet {
    pub ns: String,
    pub api_ip: String,
    pub db_ip: String,
    /// The test's side of the node's database link (what a cut takes down).
    db_link: String,
}

/// Namespaces for `n` nodes.
pub struct Lab {
    nodes: Vec<NodeNet>,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Lab {
    /// Makes the namespaces and links; `Err` says why not (not root, a kernel that
    /// refuses network namespaces, no iproute2): the caller skips with that message.
    pub fn create(n: usize) -> Result<Lab, String> {
        let pid = std::process::id() % 10_000;
        let octet = 20 + std::process::id() % 200;
        let mut lab = Lab { nodes: Vec::new() };
        for k in 0..n {
            let ns = format!("tns{pid}-{k}");
            // Left by an earlier run of the same process id: gone first.
            let _ = ip(&["netns", "del", &ns]);
            ip(&["netns", "add", &ns])?;
            let node = NodeNet {
                ns: ns.clone(),
                api_ip: format!("10.{octet}.{}.2", 101 + k),
                db_ip: format!("10.{octet}.{}.1", 1 + k),
                db_link: format!("t{pid}d{k}r"),
            };
            lab.nodes.push(node);
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            for (kind, sub) in [("d", 1 + k), ("a", 101 + k)] {
                let (root, inner) = (format!("t{pid}{kind}{k}r"), format!("t{pid}{kind}{k}n"));
                let _ = ip(&["link", "del", &root]);
                ip(&["link", "add", &root, "type", "veth", "peer", "name", &inner])?;
                ip(&["link", "set", &inner, "netns", &ns])?;
                ip(&[
                    "addr",
                    "add",
                    &format!("10.{octet}.{sub}.1/24"),
                    "dev",
                    &root,
                ])?;
                ip(&["link", "set", &root, "up"])?;
                ip(&[
                    "-n",
                    &ns,
                    "addr",
                    "add",
                    &format!("10.{octet}.{sub}.2/24"),
                    "dev",
                    &inner,
                ])?;
                ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            }
        }
        Ok(lab)
    }

    /// Node `i`'s place.
    pub fn node(&self, i: usize) -> &NodeNet {
        &self.nodes[i]
    }

    /// Cuts node `i` off the database and the other nodes (its sockets stay open).
    pub fn cut(&self, i: usize) {
        ip(&["link", "set", &self.nodes[i].db_link, "down"])
            .unwrap_or_else(|e| panic!("cut node {i}: {e}"));
    }

    /// Heals node `i`'s cut.
    pub fn heal(&self, i: usize) {
        ip(&["link", "set", &self.nodes[i].db_link, "up"])
            .unwrap_or_else(|e| panic!("heal node {i}: {e}"));
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // The veth pairs go with their namespace's end.
        for n in &self.nodes {
            let _ = ip(&["netns", "del", &n.ns]);
        }
    }
}
