//! What `exit_on_refusal` makes of an abort, in child processes of this test: an infallible
//! allocation the system refuses ends with the message and exit code 1; an abort after a
//! refusal that a fallible caller handled stays an abort (it was reported as out of memory).

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

#[global_allocator]
static GLOBAL: starhalo_exec::alloc_count::Counting = starhalo_exec::alloc_count::Counting;

const CHILD: &str = "ALLOC_REFUSAL_CHILD";
const MESSAGE: &str = "error: out of memory (test)";
/// More than any machine's address space holds: refused at once, without overcommit.
const HUGE: usize = 1 << 46;

fn main() {
    match std::env::var(CHILD).as_deref() {
        Ok("infallible") => {
            starhalo_exec::alloc_count::exit_on_refusal(MESSAGE);
            let v = vec![0u8; HUGE];
            println!("{}", v.len());
        }
        Ok("handled") => {
            starhalo_exec::alloc_count::exit_on_refusal(MESSAGE);
            let mut v: Vec<u8> = Vec::new();
            assert!(starhalo_exec::alloc_count::try_reserve_exact(&mut v, HUGE).is_err());
            let s = format!("handled a refusal of {HUGE} bytes");
            eprintln!("{s}");
            std::process::abort();
        }
        _ => parent(),
    }
}

fn parent() {
    let run = |mode: &str| {
        Command::new(std::env::current_exe().unwrap())
            .env(CHILD, mode)
            .output()
            .unwrap()
    };
    let o = run("infallible");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(MESSAGE), "{err}");
    let o = run("handled");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        o.status.signal(),
        Some(libc_sigabrt()),
        "{:?}: {err}",
        o.status
    );
    assert!(!err.contains(MESSAGE), "{err}");
    println!("alloc_refusal: ok");
}

/// SIGABRT on Linux.
fn libc_sigabrt() -> i32 {
    6
}
