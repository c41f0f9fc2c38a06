//! `target`: the devices the checkpoint/restart runtime (`microfs`) writes to, behind one
//! interface ([`Device`]): a local file, a range of a pool medium, or a namespace of a block
//! target reached over TCP (the role NVMe-oF plays in NVMe-CR).

#![deny(unsafe_code)]
