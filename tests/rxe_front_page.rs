//! The crate's front-page programs, `examples/hello_rc.rs` and
//! `examples/hello_dc.rs` (the crate docs include them verbatim), run as
//! they are: their `server` and `client` functions, each in a thread of
//! this process, talking over TCP on the loopback interface and through
//! the device under test. The two-host runs (server in one soft-RoCE
//! guest, client in the other) are `scripts/demo`'s, which `scripts/test`
//! runs; `tests/rxe_examples.rs` runs them as two processes on one device.
//!
//! Run by `scripts/test` with `MLX5DV_TEST_DEVICE` (soft-RoCE in the guest,
//! the software mlx5 device); without it the tests are ignored.

mod support;

#[path = "../examples/hello_rc.rs"]
#[allow(dead_code)]
mod hello_rc;

#[path = "../examples/hello_dc.rs"]
#[allow(dead_code)]
mod hello_dc;

use mlx5dv::{Context, Error};
use std::net::{TcpListener, TcpStream};
use std::thread;
use support::rig;

type Side<T> = fn(&str, TcpStream) -> Result<T, Box<dyn std::error::Error>>;
type Serve<T> = fn(&str, TcpListener) -> Result<T, Box<dyn std::error::Error>>;

/// Runs `server` and `client` of one program on the device under test, in
/// two threads; returns what each returned, as text for the errors.
fn run_pair(
    server: Serve<Vec<u8>>,
    client: Side<()>,
) -> (Result<Vec<u8>, String>, Result<(), String>) {
    let device = rig::device_name();
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind a TCP port");
    let addr = listener.local_addr().expect("local address");
    let dev = device.clone();
    let serving = thread::spawn(move || server(&dev, listener).map_err(|e| e.to_string()));
    let tcp = TcpStream::connect(addr).expect("connect to the server thread");
    let client_result = client(&device, tcp).map_err(|e| e.to_string());
    let server_result = serving.join().expect("the server thread panicked");
    (server_result, client_result)
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn the_front_page_rc_program_writes_its_greeting_into_the_servers_memory() {
    let (server, client) = run_pair(hello_rc::server, hello_rc::client);
    client.expect("hello_rc's client");
    assert_eq!(server.expect("hello_rc's server"), b"hello over RDMA");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn the_front_page_dc_program_writes_through_a_dct_or_is_refused_off_mlx5() {
    let mlx5 = Context::open(&rig::device_name())
        .expect("open the device")
        .is_mlx5();
    if mlx5 {
        let (server, client) = run_pair(hello_dc::server, hello_dc::client);
        client.expect("hello_dc's client");
        assert_eq!(server.expect("hello_dc's server"), b"hello over DC");
    } else {
        // The server refuses at its DCT, before it accepts a client.
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind a TCP port");
        let err = hello_dc::server(&rig::device_name(), listener).expect_err("a DCT off mlx5");
        let err = err.downcast::<Error>().expect("the crate's error");
        assert!(matches!(*err, Error::Unsupported { .. }), "{err:?}");
        assert!(err.to_string().contains("not an mlx5 device"), "{err}");
    }
}
