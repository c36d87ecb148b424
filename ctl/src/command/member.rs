//! `member list|add|remove|update|promote`.

use clap::Subcommand;
use oxetcd_proto::etcdserverpb::{MemberAddRequest, MemberUpdateRequest};

use super::{parse_hex_u64, Context, Failure};
use crate::output::View;

/// `member <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum MemberCommand {
    /// Adds a member into the cluster
    Add {
        /// comma separated peer URLs for the new member.
        #[arg(long, default_value = "")]
        peer_urls: String,
        /// indicates if the new member is raft learner
        #[arg(long)]
        learner: bool,
        /// <memberName>
        args: Vec<String>,
    },
    /// Removes a member from the cluster
    Remove {
        /// <memberID>
        args: Vec<String>,
    },
    /// Updates a member in the cluster
    Update {
        /// comma separated peer URLs for the updated member.
        #[arg(long, default_value = "")]
        peer_urls: String,
        /// <memberID>
        args: Vec<String>,
    },
    /// Lists all members in the cluster
    List,
    /// Promotes a non-voting member in the cluster
    Promote {
        /// <memberID>
        args: Vec<String>,
    },
}

fn member_id(args: &[String]) -> Result<u64, Failure> {
    if args.len() != 1 {
        return Err(Failure::bad_args("member ID is not provided"));
    }
    parse_hex_u64(&args[0])
        .map_err(|e| Failure::bad_args(format!("bad member ID arg ({e}), expecting ID in Hex")))
}

/// `member …`.
pub async fn member(ctx: &Context, command: &MemberCommand) -> Result<(), Failure> {
    match command {
        MemberCommand::List => {
            let response = ctx.client.member_list(false).await?;
            ctx.print(&View::MemberList(&response))
        }
        MemberCommand::Add {
            peer_urls,
            learner,
            args,
        } => {
            let Some(name) = args.first() else {
                return Err(Failure::bad_args("member name not provided"));
            };
            if args.len() > 1 {
                let mut message = "too many arguments".to_owned();
                for arg in args {
                    if arg.to_lowercase().starts_with("http") {
                        message.push_str(&format!(", did you mean --peer-urls={arg}"));
                    }
                }
                return Err(Failure::bad_args(message));
            }
            if peer_urls.is_empty() {
                return Err(Failure::bad_args("member peer urls not provided"));
            }
            let response = ctx
                .client
                .member_add(MemberAddRequest {
                    peer_ur_ls: peer_urls.split(',').map(str::to_owned).collect(),
                    is_learner: *learner,
                })
                .await?;
            ctx.print(&View::MemberAdd {
                response: &response,
                name,
                peer_urls,
            })
        }
        MemberCommand::Remove { args } => {
            let id = member_id(args)?;
            let response = ctx.client.member_remove(id).await?;
            ctx.print(&View::MemberRemove(id, &response))
        }
        MemberCommand::Update { peer_urls, args } => {
            let id = member_id(args)?;
            if peer_urls.is_empty() {
                return Err(Failure::bad_args("member peer urls not provided"));
            }
            let response = ctx
                .client
                .member_update(MemberUpdateRequest {
                    id,
                    peer_ur_ls: peer_urls.split(',').map(str::to_owned).collect(),
                })
                .await?;
            ctx.print(&View::MemberUpdate(id, &response))
        }
        MemberCommand::Promote { args } => {
            let id = member_id(args)?;
            let response = ctx.client.member_promote(id).await?;
            ctx.print(&View::MemberPromote(id, &response))
        }
    }
}
