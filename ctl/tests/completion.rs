//! `oxetcdctl completion bash|zsh|fish|powershell`: each script names the
//! commands and flags, the bash one loads into bash and completes a
//! command name, and an unknown shell is refused.

use std::process::Command;

use oxetcd_tests::binary_path;

fn completion(shell: &str) -> std::process::Output {
    let oxetcdctl = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    Command::new(oxetcdctl)
        .args(["completion", shell])
        .output()
        .unwrap()
}

#[test]
fn scripts_name_the_commands_and_flags() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let out = completion(shell);
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8_lossy(&out.stdout);
        for word in ["make-mirror", "member", "endpoints", "prefix"] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let out = completion("tcsh");
    assert!(!out.status.success());
}

#[test]
fn the_bash_script_completes_a_command() {
    let oxetcdctl = binary_path("oxetcdctl").unwrap_or_else(|e| panic!("{e}"));
    // Loads the script and asks it to complete `oxetcdctl make-m`.
    let probe = format!(
        "source <({} completion bash) && COMP_WORDS=(oxetcdctl make-m) COMP_CWORD=1 \
         COMP_LINE='oxetcdctl make-m' COMP_POINT=16 && _oxetcdctl oxetcdctl make-m oxetcdctl \
         && printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        oxetcdctl.display()
    );
    let out = Command::new("bash").args(["-c", &probe]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "make-mirror");
}
