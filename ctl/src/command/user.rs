//! `user add|delete|get|list|passwd|grant-role|revoke-role`.
//!
//! Passwords come as etcdctl takes them: `name:password`,
//! `--new-user-password`, typed twice at a prompt, or (with
//! `--interactive=false`) one word from stdin.

use clap::{ArgAction, Subcommand};
use oxetcd_proto::authpb::UserAddOptions;
use oxetcd_proto::etcdserverpb::{
    AuthRoleGetRequest, AuthUserAddRequest, AuthUserChangePasswordRequest, AuthUserDeleteRequest,
    AuthUserGetRequest, AuthUserGrantRoleRequest, AuthUserListRequest, AuthUserRevokeRoleRequest,
};

use super::{expect_args, one_arg, parse_go_bool, Context, Failure};
use crate::output::{AuthChange, View};
use crate::prompt;

/// `user <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum UserCommand {
    /// Adds a new user
    Add {
        /// Read password from stdin instead of interactive terminal
        #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_value = "true", default_missing_value = "true", value_parser = parse_go_bool)]
        interactive: bool,
        /// Supply password from the command line flag
        #[arg(long, default_value = "")]
        new_user_password: String,
        /// Create a user without password (CN based auth only)
        #[arg(long)]
        no_password: bool,
        /// <user name or user:password>
        args: Vec<String>,
    },
    /// Deletes a user
    Delete {
        /// <user name>
        args: Vec<String>,
    },
    /// Gets detailed information of a user
    Get {
        /// Show permissions of roles granted to the user
        #[arg(long)]
        detail: bool,
        /// <user name>
        args: Vec<String>,
    },
    /// Lists all users
    List {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Changes password of user
    Passwd {
        /// If true, read password from stdin instead of interactive terminal
        #[arg(long, action = ArgAction::Set, num_args = 0..=1, require_equals = true, default_value = "true", default_missing_value = "true", value_parser = parse_go_bool)]
        interactive: bool,
        /// <user name>
        args: Vec<String>,
    },
    /// Grants a role to a user
    GrantRole {
        /// <user name> <role name>
        args: Vec<String>,
    },
    /// Revokes a role from a user
    RevokeRole {
        /// <user name> <role name>
        args: Vec<String>,
    },
}

/// `user …`.
pub async fn user(ctx: &Context, command: &UserCommand) -> Result<(), Failure> {
    let (change, header) = match command {
        UserCommand::Get { detail, args } => {
            let name = one_arg(args, "user get command requires user name as its argument")?;
            return get(ctx, name, *detail).await;
        }
        UserCommand::List { args } => {
            expect_args(args, 0, "user list command requires no arguments")?;
            let response = ctx.client.user_list(AuthUserListRequest {}).await?;
            return ctx.print(&View::UserList(&response));
        }
        UserCommand::Add {
            interactive,
            new_user_password,
            no_password,
            args,
        } => {
            let arg = one_arg(args, "user add command requires user name as its argument")?;
            let (name, request) =
                add_request(arg, *interactive, new_user_password, *no_password).await?;
            let response = ctx.client.user_add(request).await?;
            (AuthChange::UserAdded(name), response.header)
        }
        UserCommand::Delete { args } => {
            let name = one_arg(
                args,
                "user delete command requires user name as its argument",
            )?;
            let request = AuthUserDeleteRequest {
                name: name.to_owned(),
            };
            let response = ctx.client.user_delete(request).await?;
            (AuthChange::UserDeleted(name), response.header)
        }
        UserCommand::Passwd { interactive, args } => {
            let name = one_arg(
                args,
                "user passwd command requires user name as its argument",
            )?;
            let password = if *interactive {
                new_password(name).await?
            } else {
                prompt::word().await
            };
            let request = AuthUserChangePasswordRequest {
                name: name.to_owned(),
                password,
                hashed_password: String::new(),
            };
            let response = ctx.client.user_change_password(request).await?;
            (AuthChange::PasswordChanged, response.header)
        }
        UserCommand::GrantRole { args } => {
            expect_args(
                args,
                2,
                "user grant command requires user name and role name as its argument",
            )?;
            let (user, role) = (&args[0], &args[1]);
            let request = AuthUserGrantRoleRequest {
                user: user.clone(),
                role: role.clone(),
            };
            let response = ctx.client.user_grant_role(request).await?;
            (AuthChange::RoleGranted { user, role }, response.header)
        }
        UserCommand::RevokeRole { args } => {
            expect_args(
                args,
                2,
                "user revoke-role requires user name and role name as its argument",
            )?;
            let (user, role) = (&args[0], &args[1]);
            let request = AuthUserRevokeRoleRequest {
                name: user.clone(),
                role: role.clone(),
            };
            let response = ctx.client.user_revoke_role(request).await?;
            (AuthChange::RoleRevoked { user, role }, response.header)
        }
    };
    ctx.print(&View::AuthChange(change, header.as_ref()))
}

/// `user add`'s request: the name and password from `arg` and the flags,
/// in etcdctl's order of precedence.
async fn add_request<'a>(
    arg: &'a str,
    interactive: bool,
    new_user_password: &str,
    no_password: bool,
) -> Result<(&'a str, AuthUserAddRequest), Failure> {
    let (name, password) = if no_password {
        (arg, String::new())
    } else if !new_user_password.is_empty() {
        (arg, new_user_password.to_owned())
    } else if let Some((name, password)) = arg.split_once(':') {
        if name.is_empty() {
            return Err(Failure::bad_args("empty user name is not allowed"));
        }
        (name, password.to_owned())
    } else if interactive {
        (arg, new_password(arg).await?)
    } else {
        (arg, prompt::word().await)
    };
    let request = AuthUserAddRequest {
        name: name.to_owned(),
        password,
        options: Some(UserAddOptions { no_password }),
        hashed_password: String::new(),
    };
    Ok((name, request))
}

/// `user get`; with `--detail`, each of the user's roles as `role get`
/// prints it.
async fn get(ctx: &Context, name: &str, detail: bool) -> Result<(), Failure> {
    let response = ctx
        .client
        .user_get(AuthUserGetRequest {
            name: name.to_owned(),
        })
        .await?;
    if !detail {
        return ctx.print(&View::UserGet(name, &response));
    }
    println!("User: {name}");
    for role in &response.roles {
        println!();
        let permissions = ctx
            .client
            .role_get(AuthRoleGetRequest { role: role.clone() })
            .await?;
        ctx.print(&View::RoleGet(role, &permissions))?;
    }
    Ok(())
}

/// A new password for `name`, typed twice, as etcdctl asks for it.
async fn new_password(name: &str) -> Result<String, Failure> {
    let failed = |e: String| Failure::bad_args(format!("failed to ask password: {e}"));
    let first = prompt::password(&format!("Password of {name}: "))
        .await
        .map_err(failed)?;
    if first.is_empty() {
        return Err(Failure::bad_args("empty password"));
    }
    let again = prompt::password(&format!("Type password of {name} again for confirmation: "))
        .await
        .map_err(failed)?;
    if first != again {
        return Err(Failure::bad_args("given passwords are different"));
    }
    Ok(first)
}
