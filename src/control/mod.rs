//! See README.md, "Architecture".
