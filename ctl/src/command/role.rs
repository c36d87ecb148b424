//! `role add|delete|get|list|grant-permission|revoke-permission`.

use clap::Subcommand;
use oxetcd_proto::authpb::Permission;
use oxetcd_proto::etcdserverpb::{
    AuthRoleAddRequest, AuthRoleDeleteRequest, AuthRoleGetRequest, AuthRoleGrantPermissionRequest,
    AuthRoleListRequest, AuthRoleRevokePermissionRequest,
};

use super::kv::prefix_end;
use super::{expect_args, one_arg, Context, Failure};
use crate::output::{AuthChange, View};

/// `role <subcommand>`.
#[derive(Subcommand, Clone, Debug)]
pub enum RoleCommand {
    /// Adds a new role
    Add {
        /// <role name>
        args: Vec<String>,
    },
    /// Deletes a role
    Delete {
        /// <role name>
        args: Vec<String>,
    },
    /// Gets detailed information of a role
    Get {
        /// <role name>
        args: Vec<String>,
    },
    /// Lists all roles
    List {
        #[arg(hide = true)]
        args: Vec<String>,
    },
    /// Grants a key to a role
    GrantPermission {
        /// grant a prefix permission
        #[arg(long)]
        prefix: bool,
        /// grant a permission of keys that are greater than or equal to the given key using byte compare
        #[arg(long)]
        from_key: bool,
        /// <role name> <permission type> <key> [endkey]
        args: Vec<String>,
    },
    /// Revokes a key from a role
    RevokePermission {
        /// revoke a prefix permission
        #[arg(long)]
        prefix: bool,
        /// revoke a permission of keys that are greater than or equal to the given key using byte compare
        #[arg(long)]
        from_key: bool,
        /// <role name> <key> [endkey]
        args: Vec<String>,
    },
}

/// `role …`.
pub async fn role(ctx: &Context, command: &RoleCommand) -> Result<(), Failure> {
    let (change, header) = match command {
        RoleCommand::Get { args } => {
            let name = one_arg(args, "role get command requires role name as its argument")?;
            let role = name.to_owned();
            let response = ctx.client.role_get(AuthRoleGetRequest { role }).await?;
            return ctx.print(&View::RoleGet(name, &response));
        }
        RoleCommand::List { args } => {
            expect_args(args, 0, "role list command requires no arguments")?;
            let response = ctx.client.role_list(AuthRoleListRequest {}).await?;
            return ctx.print(&View::RoleList(&response));
        }
        RoleCommand::RevokePermission {
            prefix,
            from_key,
            args,
        } => return revoke_permission(ctx, args, *prefix, *from_key).await,
        RoleCommand::Add { args } => {
            let name = one_arg(args, "role add command requires role name as its argument")?;
            let request = AuthRoleAddRequest {
                name: name.to_owned(),
            };
            let response = ctx.client.role_add(request).await?;
            (AuthChange::RoleAdded(name), response.header)
        }
        RoleCommand::Delete { args } => {
            let name = one_arg(
                args,
                "role delete command requires role name as its argument",
            )?;
            let role = name.to_owned();
            let response = ctx
                .client
                .role_delete(AuthRoleDeleteRequest { role })
                .await?;
            (AuthChange::RoleDeleted(name), response.header)
        }
        RoleCommand::GrantPermission {
            prefix,
            from_key,
            args,
        } => {
            if args.len() < 3 {
                return Err(Failure::bad_args(
                    "role grant command requires role name, permission type, and key [endkey] as its argument",
                ));
            }
            let perm_type = permission_type(&args[1])?;
            let (key, range_end) = permission_range(&args[2..], *prefix, *from_key)?;
            let name = &args[0];
            let request = AuthRoleGrantPermissionRequest {
                name: name.clone(),
                perm: Some(Permission {
                    perm_type,
                    key,
                    range_end,
                }),
            };
            let response = ctx.client.role_grant_permission(request).await?;
            (AuthChange::PermissionGranted(name), response.header)
        }
    };
    ctx.print(&View::AuthChange(change, header.as_ref()))
}

/// `role revoke-permission`; etcdctl names the key as given (not the `\0`
/// an empty one becomes) and the range end as sent.
async fn revoke_permission(
    ctx: &Context,
    args: &[String],
    prefix: bool,
    from_key: bool,
) -> Result<(), Failure> {
    if args.len() < 2 {
        return Err(Failure::bad_args(
            "role revoke-permission command requires role name and key [endkey] as its argument",
        ));
    }
    let (key, range_end) = permission_range(&args[1..], prefix, from_key)?;
    let role = &args[0];
    let request = AuthRoleRevokePermissionRequest {
        role: role.clone(),
        key,
        range_end: range_end.clone(),
    };
    let response = ctx.client.role_revoke_permission(request).await?;
    let change = AuthChange::PermissionRevoked {
        role,
        key: args[1].as_bytes(),
        range_end: &range_end,
    };
    ctx.print(&View::AuthChange(change, response.header.as_ref()))
}

/// `read`, `write` or `readwrite`, in any case, as the protobuf enum's
/// value.
fn permission_type(text: &str) -> Result<i32, Failure> {
    match text.to_uppercase().as_str() {
        "READ" => Ok(0),
        "WRITE" => Ok(1),
        "READWRITE" => Ok(2),
        _ => Err(Failure::bad_args(format!(
            "invalid permission type: {text}"
        ))),
    }
}

/// The key and range end of a permission from `<key> [endkey]` and the
/// flags, as etcdctl's `permRange` makes them. An empty key stands for the
/// whole key space: `\0`, open ended (`\0`) with either flag, and its end
/// key is ignored.
fn permission_range(
    args: &[String],
    prefix: bool,
    from_key: bool,
) -> Result<(Vec<u8>, Vec<u8>), Failure> {
    const EXCLUSIVE: &str = "--from-key and --prefix flags are mutually exclusive";
    let key = args[0].as_bytes();
    if key.is_empty() {
        if prefix && from_key {
            return Err(Failure::bad_args(EXCLUSIVE));
        }
        let range_end = if prefix || from_key {
            vec![0]
        } else {
            Vec::new()
        };
        return Ok((vec![0], range_end));
    }
    let range_end = match (args.get(1), prefix, from_key) {
        (None, true, true) => return Err(Failure::bad_args(EXCLUSIVE)),
        (None, true, false) => prefix_end(key),
        (None, false, true) => vec![0],
        (None, false, false) => Vec::new(),
        (Some(_), true, _) => {
            return Err(Failure::bad_args(
                "unexpected endkey argument with --prefix flag",
            ))
        }
        (Some(_), false, true) => {
            return Err(Failure::bad_args(
                "unexpected endkey argument with --from-key flag",
            ))
        }
        (Some(end), false, false) => end.as_bytes().to_vec(),
    };
    Ok((key.to_vec(), range_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(args: &[&str], prefix: bool, from_key: bool) -> Result<(Vec<u8>, Vec<u8>), String> {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        permission_range(&args, prefix, from_key).map_err(|f| f.message.unwrap_or_default())
    }

    #[test]
    fn permission_ranges_as_etcdctl_makes_them() {
        assert_eq!(range(&["foo"], false, false), Ok((b"foo".to_vec(), vec![])));
        assert_eq!(
            range(&["foo", "zoo"], false, false),
            Ok((b"foo".to_vec(), b"zoo".to_vec()))
        );
        assert_eq!(
            range(&["foo"], true, false),
            Ok((b"foo".to_vec(), b"fop".to_vec()))
        );
        assert_eq!(range(&["foo"], false, true), Ok((b"foo".to_vec(), vec![0])));
        assert_eq!(range(&[""], false, false), Ok((vec![0], vec![])));
        assert_eq!(range(&["", "zoo"], false, false), Ok((vec![0], vec![])));
        assert_eq!(range(&[""], true, false), Ok((vec![0], vec![0])));
        assert_eq!(range(&[""], false, true), Ok((vec![0], vec![0])));
        let exclusive = Err("--from-key and --prefix flags are mutually exclusive".to_owned());
        assert_eq!(range(&[""], true, true), exclusive);
        assert_eq!(range(&["foo"], true, true), exclusive);
        assert_eq!(
            range(&["foo", "zoo"], true, true),
            Err("unexpected endkey argument with --prefix flag".to_owned())
        );
        assert_eq!(
            range(&["foo", "zoo"], false, true),
            Err("unexpected endkey argument with --from-key flag".to_owned())
        );
    }

    #[test]
    fn permission_types_ignore_case() {
        assert_eq!(permission_type("readWrite").ok(), Some(2));
        assert_eq!(
            permission_type("exec").err().and_then(|f| f.message),
            Some("invalid permission type: exec".to_owned())
        );
    }
}
