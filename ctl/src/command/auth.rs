//! `auth enable|disable|status`.
//!
//! `enable` and `disable` print their one line whatever the output format,
//! as etcdctl does; `status` is etcdctl 3.5's and goes through the printer.

use clap::Subcommand;
use oxetcd_proto::etcdserverpb::{
    AuthDisableRequest, AuthEnableRequest, AuthRoleAddRequest, AuthStatusRequest,
    AuthUserGrantRoleRequest,
};

use super::{expect_args, Context, Failure};
use crate::client::Client;
use crate::error::ROOT_ROLE_NOT_EXIST;
use crate::output::View;
use crate::Error;

/// `AuthEnable` attempts: the first may find the root user without the
/// root role; once it has it, the second succeeds unless someone took the
/// role away meanwhile, and the third then fails adding it again.
const ENABLE_ATTEMPTS_MAX: usize = 3;

/// `auth <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum AuthCommand {
    /// Enables authentication
    Enable {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Disables authentication
    Disable {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Returns authentication status
    Status {
        #[arg(hide = true)]
        args: Vec<String>,
    },
}

/// `auth …`.
pub async fn auth(ctx: &Context, command: &AuthCommand) -> Result<(), Failure> {
    match command {
        AuthCommand::Enable { args } => {
            expect_args(args, 0, "auth enable command does not accept any arguments")?;
            enable(&ctx.client).await?;
            println!("Authentication Enabled");
        }
        AuthCommand::Disable { args } => {
            expect_args(
                args,
                0,
                "auth disable command does not accept any arguments",
            )?;
            ctx.client.auth_disable(AuthDisableRequest {}).await?;
            println!("Authentication Disabled");
        }
        AuthCommand::Status { args } => {
            expect_args(args, 0, "auth status command does not accept any arguments")?;
            let response = ctx.client.auth_status(AuthStatusRequest {}).await?;
            ctx.print(&View::AuthStatus(&response))?;
        }
    }
    Ok(())
}

/// etcdctl's `auth enable`: when the root user lacks the root role, the
/// role is made (it must not exist yet) and granted, and enabling is tried
/// again.
async fn enable(client: &Client) -> Result<(), Error> {
    let mut last = None;
    for _ in 0..ENABLE_ATTEMPTS_MAX {
        match client.auth_enable(AuthEnableRequest {}).await {
            Ok(_) => return Ok(()),
            Err(e) if e.is_etcd(ROOT_ROLE_NOT_EXIST) => last = Some(e),
            Err(e) => return Err(e),
        }
        client
            .role_add(AuthRoleAddRequest {
                name: "root".to_owned(),
            })
            .await?;
        client
            .user_grant_role(AuthUserGrantRoleRequest {
                user: "root".to_owned(),
                role: "root".to_owned(),
            })
            .await?;
    }
    Err(last.unwrap_or(Error::Protocol("auth enable gave up".to_owned())))
}
