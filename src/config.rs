//! airlockd / airlockctl configuration (YAML).
