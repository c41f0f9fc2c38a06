//! Shells: `cd` into the checkpoint directory carries over to the commands they run (dash uses
//! vfork, bash fork; the idle namespace is closed before the fork so the child can open it, and
//! the working directory travels in the environment of execve), and `ls -l` (which asks for
//! ACLs and security labels) works without complaint.
//!
//! Not covered because it does not work: a redirection such as `cmd > "$CR/f"` hands `cmd` a
//! descriptor of the namespace across exec, which the new process cannot use (EBADF); glibc's
//! stdio on standard streams also writes through libc's internal write, which the shim does
//! not see. Commands must open their files in the namespace themselves (dd of=, tar f, cp).

mod common;
use common::*;
use std::process::Command;

fn shell(s: &Scratch, sh: &str, script: &str) -> (String, String) {
    let o = s
        .shim(&mut Command::new(sh))
        .arg("-c")
        .arg(script)
        .env("CR", &s.cr)
        .output()
        .expect("run the shell");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(
        o.status.success(),
        "{sh} -c {script:?}: {}\nstdout:\n{out}\nstderr:\n{err}",
        o.status
    );
    (out, err)
}

#[test]
fn cd_into_the_checkpoint_directory_carries_over_to_commands() {
    let s = Scratch::new("shell");
    for sh in ["sh", "bash"] {
        let (out, err) = shell(
            &s,
            sh,
            &format!(
                r#"cd "$CR" && mkdir {sh}d && cd {sh}d && printf data | dd of=f status=none && cat f && echo && ls && pwd && /bin/pwd && cd .. && ls"#
            ),
        );
        let cr = s.cr.display();
        let want = match sh {
            "sh" => format!("data\nf\n{cr}/shd\n{cr}/shd\nshd\n"),
            _ => format!("data\nf\n{cr}/bashd\n{cr}/bashd\nbashd\nshd\n"),
        };
        assert_eq!(out, want, "{sh}; stderr:\n{err}");
        assert_eq!(err, "", "{sh}");
    }
    // A pipeline of several commands in the namespace, and tar with a relative archive name.
    let (out, err) = shell(
        &s,
        "bash",
        r#"cd "$CR/bashd" && tar cf ../t.tar . && cd .. && tar tf t.tar | sort | tr '\n' ' '"#,
    );
    assert_eq!(out, "./ ./f ", "stderr:\n{err}");
    assert!(!s.cr.exists(), "nothing reached the kernel's file system");
}

#[test]
fn ls_l_asks_for_extended_attributes_and_gets_none() {
    let s = Scratch::new("lsl");
    ok(s.shim(&mut Command::new("mkdir")).arg(s.cr.join("d")));
    let src = s.k.join("h");
    std::fs::write(&src, b"host\n").unwrap();
    std::fs::set_permissions(&src, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    ok(s.shim(&mut Command::new("cp"))
        .arg(&src)
        .arg(s.cr.join("d/h")));
    let o = s
        .shim(&mut Command::new("ls"))
        .arg("-l")
        .arg(s.cr.join("d"))
        .output()
        .expect("ls");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success() && err.is_empty(), "{o:?}");
    let line = out.lines().nth(1).expect("one entry");
    assert!(
        line.starts_with("-rw-r--r-- 1 ") && line.ends_with(" h"),
        "{out}"
    );
}
