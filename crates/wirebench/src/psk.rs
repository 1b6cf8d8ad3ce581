//! The pre-shared key a command is given: `--psk-file`, or the `WIREBENCH_PSK` variable.

use wirebench_engine::Psk;

/// The pre-shared key from `--psk-file`, else from WIREBENCH_PSK, else none.
pub fn load_psk(file: Option<&std::path::Path>) -> Result<Option<Psk>, String> {
    match file {
        Some(path) => wirebench_engine::load_psk(path)
            .map(Some)
            .map_err(|e| format!("--psk-file {e}")),
        None => match std::env::var_os("WIREBENCH_PSK") {
            Some(v) => Psk::new(v.as_encoded_bytes())
                .map(Some)
                .map_err(|e| format!("WIREBENCH_PSK: {e}")),
            None => Ok(None),
        },
    }
}
