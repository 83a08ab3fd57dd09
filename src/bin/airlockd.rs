fn main() {
    eprintln!("airlockd: not built yet");
    std::process::exit(2);
}
