//! Block mode of `loop`: propose / audit / refine / commit / abandon (see the module above).

use crate::actions::{JobCtx, Outcome};
use serde_json::Value;

pub async fn run(_ctx: &JobCtx, mode: &str, _params: &Value) -> Outcome {
    Outcome::failed(format!("loop mode {mode:?} is not built yet"))
}
