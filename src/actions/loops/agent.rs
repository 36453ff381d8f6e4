//! Agent mode of `loop`: model-proposed steps through command security (see the module above).

use crate::actions::{JobCtx, Outcome};
use serde_json::Value;

pub async fn run(_ctx: &JobCtx, _params: &Value) -> Outcome {
    Outcome::failed("loop mode \"agent\" is not built yet")
}
