//! Build-time probe: does this kernel offer userfaultfd with asynchronous write-protection?
//!
//! The userfaultfd tracker's tests need it. Where it is missing they are compiled as ignored
//! (`cfg(kavach_no_uffd_wp)`), so `cargo test` counts them as ignored, with the reason, and never
//! as passed. Where the probe finds it, a test that then finds no support at run time fails.
//! The probe asks for the same features the tracker does (`src/tracker/uffd.rs`).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kavach_no_uffd_wp)");
    println!("cargo::rerun-if-changed=build.rs");
    if !uffd_wp_async() {
        println!("cargo::rustc-cfg=kavach_no_uffd_wp");
        println!(
            "cargo::warning=userfaultfd asynchronous write-protection is missing: \
             the uffd tracker's tests are marked ignored"
        );
    }
}

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn uffd_wp_async() -> bool {
    #[repr(C)]
    struct UffdioApi {
        api: u64,
        features: u64,
        ioctls: u64,
    }
    const UFFD_USER_MODE_ONLY: libc::c_int = 1;
    const UFFD_API: u64 = 0xAA;
    // WP_ASYNC | WP_UNPOPULATED | WP_HUGETLBFS_SHMEM, as the tracker asks.
    const FEATURES: u64 = (1 << 15) | (1 << 13) | (1 << 12);
    // _IOWR(0xAA, 0x3F, struct uffdio_api)
    const UFFDIO_API: u64 = 0xc018_aa3f;
    // SAFETY: userfaultfd(2) takes only flags and returns a new descriptor or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_userfaultfd,
            libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY,
        )
    };
    if fd < 0 {
        return false;
    }
    let fd = fd as libc::c_int;
    let mut api = UffdioApi {
        api: UFFD_API,
        features: FEATURES,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes one `uffdio_api`, which lives for the call.
    let ok = unsafe { libc::ioctl(fd, UFFDIO_API as libc::Ioctl, &mut api) } == 0
        && api.features & FEATURES == FEATURES;
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    ok
}

#[cfg(not(target_os = "linux"))]
fn uffd_wp_async() -> bool {
    false
}
