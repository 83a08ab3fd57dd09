fn main() {
    eprintln!("airlockctl: not built yet");
    std::process::exit(2);
}
