//! The storage balancer: devices for ranks from a topology file.
