//! NVM DIMMs, the RAID-5 layout and the redundancy addresses (being written).
