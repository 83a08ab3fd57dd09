// A model answer's usage as the provider route reads it streaming past. Input: a selector
// byte (API, streamed or not, where to cut), then the answer's bytes. Invariant: what the
// meter reads does not depend on how the bytes were split into chunks (the network
// decides that, not the provider), and never panics on any bytes.
use airlock::gateway::provider::usage::{Api, Meter};

pub fn check(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let api = if sel & 1 == 0 {
        Api::AnthropicMessages
    } else {
        Api::OpenAiResponses
    };
    let streaming = sel & 2 != 0;
    let mut whole = Meter::new(api, streaming);
    whole.feed(body);
    let whole = whole.finish();
    let mut split = Meter::new(api, streaming);
    let step = usize::from(sel >> 2).max(1);
    for chunk in body.chunks(step) {
        split.feed(chunk);
    }
    assert_eq!(split.finish(), whole, "the chunking changed the usage read");
}
