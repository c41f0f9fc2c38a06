//! SIGTERM and SIGINT shut the server down gracefully. This file is its own test binary (its own
//! process), so the handlers it installs affect no other test.

mod support;

use server::install_signal_handlers;
use support::{TestServer, expect};

#[test]
fn sigterm_then_sigint_shut_down_gracefully() {
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let mut server = TestServer::default_config();
        install_signal_handlers(&server.handle).expect("install handlers");
        let mut c = server.client();
        expect(&mut c, "SET a 1", "+OK\r\n");
        signal_hook::low_level::raise(signal).expect("raise");
        assert_eq!(c.read_to_close(), b"");
        let summary = server.join();
        assert_eq!(summary.commands_processed, 1);
        assert_eq!(server.backend.shutdown_calls(), 1);
    }
}
