//! See README.md, "Architecture".
<<<<<<< HEAD
pub mod notify;
=======

pub mod ledger;
>>>>>>> daemon-records
