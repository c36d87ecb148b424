//! The driver's view of the peer links: raft messages and snapshots out,
//! transport events in as node inputs, and the link's peer list kept equal
//! to the node's member list.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use oxetcd_core::raft::Persist;
use oxetcd_core::storage::KvStore;
use oxetcd_core::Input;
use oxetcd_proto::eraftpb::{Message, MessageType};
use oxetcd_proto::etcdserverpb::Member;
use oxetcd_storage::snapshot::{SnapshotExport, CHUNK_BYTES_DEFAULT};
use tracing::{debug, info, warn};

use super::run::fatal;
use super::PeerLink;
use crate::peer::{PeerEvent, ReceivedSnapshot};

/// The driver's side of the cluster: the peer link, snapshots received and
/// not yet installed, and the peers the link was given.
pub(super) struct ClusterLinks<K> {
    kv: K,
    peers: Option<Arc<dyn PeerLink>>,
    /// Received snapshots by index, until a `Persist` installs one (older
    /// ones go with it).
    received: BTreeMap<u64, ReceivedSnapshot>,
    /// The peers handed to the link, with their URLs.
    known: HashMap<u64, Vec<String>>,
    member_id: u64,
    /// A peer refused this member as removed from the cluster.
    pub(super) refused_as_removed: bool,
    /// Heartbeats the link refused (etcd's `heartbeat_send_failures_total`).
    heartbeat_send_failures: prometheus::IntCounter,
}

impl<K: KvStore> ClusterLinks<K> {
    /// Links for member `member_id`, reaching its peers through `peers`.
    pub(super) fn new(
        kv: K,
        peers: Option<Arc<dyn PeerLink>>,
        member_id: u64,
        heartbeat_send_failures: prometheus::IntCounter,
    ) -> Self {
        Self {
            heartbeat_send_failures,
            kv,
            peers,
            received: BTreeMap::new(),
            known: HashMap::new(),
            member_id,
            refused_as_removed: false,
        }
    }

    /// Whether the member has peers it was told of (see `sync_members`).
    pub(super) fn has_peers(&self) -> bool {
        !self.known.is_empty()
    }

    /// Turns a transport event into the node's input, if it is one.
    pub(super) fn peer_event(&mut self, event: PeerEvent) -> Option<Input> {
        match event {
            PeerEvent::Message(message) => Some(Input::Peer(message)),
            PeerEvent::Snapshot { message, data } => {
                let index = message.get_snapshot().get_metadata().index;
                info!(
                    from = message.from,
                    index,
                    bytes = data.len_bytes(),
                    "received a snapshot"
                );
                self.received.insert(index, data);
                Some(Input::SnapshotReceived { message })
            }
            PeerEvent::Unreachable { to } => Some(Input::Unreachable { to }),
            PeerEvent::ClusterId { id } => Some(Input::ClusterId { id }),
            PeerEvent::SnapshotSent { to, delivered } => {
                info!(to, delivered, "snapshot stream ended");
                Some(Input::SnapshotSent { to, delivered })
            }
            PeerEvent::RemovedFromCluster { by } => {
                warn!(
                    by = %format_args!("{by:x}"),
                    "this member was removed from the cluster"
                );
                self.refused_as_removed = true;
                None
            }
        }
    }

    /// Sends a raft message; a refused send comes back as the node's
    /// `Unreachable` input. With no link the message is dropped.
    pub(super) fn send(&self, message: Message) -> Option<Input> {
        let to = message.to;
        let heartbeat = message.msg_type == MessageType::MsgHeartbeat;
        let Some(peers) = &self.peers else {
            debug!(to, msg_type = ?message.msg_type, "no peer transport; message dropped");
            return None;
        };
        match peers.send(message) {
            Ok(()) => None,
            Err(e) => {
                debug!(to, error = %e, "peer message dropped");
                if heartbeat {
                    self.heartbeat_send_failures.inc();
                }
                Some(Input::Unreachable { to })
            }
        }
    }

    /// Streams the backend as it is now to member `to`, then `message`.
    /// The view must be taken before the node applies anything more: it is
    /// the state at the snapshot index. With no link the snapshot is
    /// reported undelivered at once.
    pub(super) fn send_snapshot(&self, to: u64, message: Message) -> Option<Input> {
        let Some(peers) = &self.peers else {
            debug!(to, "no peer transport; snapshot not sent");
            return Some(Input::SnapshotSent {
                to,
                delivered: false,
            });
        };
        let view = match self.kv.read() {
            Ok(view) => view,
            Err(e) => fatal("reading the backend for a snapshot", &e),
        };
        let index = message.get_snapshot().get_metadata().index;
        info!(to, index, "streaming a snapshot");
        let chunks = SnapshotExport::new(view, CHUNK_BYTES_DEFAULT)
            .map(|chunk| chunk.map(bytes::Bytes::from));
        peers.send_snapshot(message, Box::new(chunks));
        None
    }

    /// The received data a `Persist` installs, if it installs a snapshot;
    /// older received snapshots are superseded and their files go.
    pub(super) fn take_snapshot(&mut self, persist: &Persist) -> Option<ReceivedSnapshot> {
        let index = persist.snapshot.as_ref()?.index;
        let data = self.received.remove(&index);
        self.received = self.received.split_off(&index);
        data
    }

    /// Gives the link the node's members (other than this one) and takes
    /// away those that are gone.
    pub(super) fn sync_members(&mut self, members: &[Member]) {
        let Some(peers) = &self.peers else {
            return;
        };
        let mut seen = HashMap::new();
        for member in members {
            if member.id == self.member_id || member.id == 0 {
                continue;
            }
            if self.known.get(&member.id) != Some(&member.peer_ur_ls) {
                info!(
                    peer = %format_args!("{:x}", member.id),
                    urls = ?member.peer_ur_ls,
                    "peer added or updated"
                );
                peers.add_peer(member.id, member.peer_ur_ls.clone());
            }
            seen.insert(member.id, member.peer_ur_ls.clone());
        }
        for id in self.known.keys() {
            if !seen.contains_key(id) {
                info!(peer = %format_args!("{id:x}"), "peer removed");
                peers.remove_peer(*id);
            }
        }
        // Peers the link was given before the node ran (from
        // `--initial-cluster`) that the members do not list: IDs the flags
        // derived and the cluster does not use (another token after a
        // restart). Dialing them would be refused for ever.
        if !seen.is_empty() {
            for id in peers.peers() {
                if !seen.contains_key(&id) && !self.known.contains_key(&id) {
                    info!(peer = %format_args!("{id:x}"), "not dialing a peer the members do not list");
                    peers.forget_peer(id);
                }
            }
        }
        self.known = seen;
    }
}
