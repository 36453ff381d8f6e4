//! Typed reading of action params, shared by the handlers and the `params` fuzz target.
//!
//! The registry validates params against each action's JSON Schema first; the handler then
//! reads the values it uses through these functions. A value the schema accepts must decode
//! to what the handler uses: JSON Schema counts `5.0` as an integer, so integers are read
//! from integral floats too (reading them with `as_u64` silently fell back to a default).
//! A value of the wrong type is an error naming the field, never a silent default.
//! [`check`] runs the decoding of one action by name (the fuzz target's oracle).

use crate::clients::Permission;
use crate::infer::Lang;
use serde_json::Value;

/// `params[key]` as an integer: absent/null → `None`; an integral number (`7`, `7.0`) → its
/// value; anything else → an error.
pub fn int(params: &Value, key: &str) -> Result<Option<i64>, String> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            if let Some(i) = n.as_i64() {
                return Ok(Some(i));
            }
            if n.as_u64().is_some() {
                return Err(format!("{key} is out of range"));
            }
            match n.as_f64() {
                // the exact range of i64 as f64: [-2^63, 2^63)
                Some(f)
                    if f.fract() == 0.0
                        && (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) =>
                {
                    Ok(Some(f as i64))
                }
                _ => Err(format!("{key} must be an integer")),
            }
        }
        Some(_) => Err(format!("{key} must be an integer")),
    }
}

/// `params[key]` as a non-negative integer.
pub fn uint(params: &Value, key: &str) -> Result<Option<u64>, String> {
    if let Some(Value::Number(n)) = params.get(key) {
        if let Some(u) = n.as_u64() {
            return Ok(Some(u));
        }
    }
    match int(params, key)? {
        None => Ok(None),
        Some(i) => u64::try_from(i)
            .map(Some)
            .map_err(|_| format!("{key} must not be negative")),
    }
}

/// `params[key]` as a string (absent/null → `None`).
pub fn string<'a>(params: &'a Value, key: &str) -> Result<Option<&'a str>, String> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("{key} must be a string")),
    }
}

/// `params[key]` as a boolean (absent/null → `None`).
pub fn boolean(params: &Value, key: &str) -> Result<Option<bool>, String> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(format!("{key} must be a boolean")),
    }
}

/// A required string.
pub fn required_string<'a>(params: &'a Value, key: &str) -> Result<&'a str, String> {
    string(params, key)?.ok_or_else(|| format!("{key} is required"))
}

/// `language`: `js` (default) or `ts`.
pub fn language(params: &Value) -> Result<Lang, String> {
    match string(params, "language")? {
        None => Ok(Lang::Js),
        Some(s) => Lang::parse(s).ok_or_else(|| format!("unknown language {s:?} (js or ts)")),
    }
}

/// `execute_bash` params.
#[derive(Debug, Clone, PartialEq)]
pub struct BashParams {
    pub command: String,
    pub workdir: Option<String>,
    pub timeout_ms: Option<u64>,
    pub force_execute: bool,
}

pub fn execute_bash(params: &Value) -> Result<BashParams, String> {
    Ok(BashParams {
        command: required_string(params, "command")?.to_string(),
        workdir: string(params, "workdir")?.map(str::to_string),
        timeout_ms: uint(params, "timeout_ms")?,
        force_execute: boolean(params, "force_execute")?.unwrap_or(false),
    })
}

/// `check_command` params: the command and where it would run.
pub fn check_command(params: &Value) -> Result<(String, Option<String>), String> {
    Ok((
        required_string(params, "command")?.to_string(),
        string(params, "workdir")?.map(str::to_string),
    ))
}

/// `get_result` params: the job id.
pub fn get_result(params: &Value) -> Result<i64, String> {
    int(params, "job_id")?.ok_or_else(|| "job_id is required".to_string())
}

/// `request_permission` params: permission, pattern, justification.
pub fn request_permission(params: &Value) -> Result<(Permission, String, Option<String>), String> {
    let perm =
        Permission::parse(required_string(params, "permission")?).map_err(|e| e.to_string())?;
    Ok((
        perm,
        required_string(params, "pattern")?.to_string(),
        string(params, "justification")?.map(str::to_string),
    ))
}

/// `infer_permissions` params: code and language.
pub fn infer_permissions(params: &Value) -> Result<(String, Lang), String> {
    Ok((
        required_string(params, "code")?.to_string(),
        language(params)?,
    ))
}

/// `run_code` params: code, language, CPU budget.
pub fn run_code(params: &Value) -> Result<(String, Lang, Option<u64>), String> {
    Ok((
        required_string(params, "code")?.to_string(),
        language(params)?,
        uint(params, "timeout_ms")?,
    ))
}

/// The hidden `sleep` test action: ms, fail, ignore_cancel.
pub fn sleep(params: &Value) -> Result<(u64, bool, bool), String> {
    Ok((
        uint(params, "ms")?.unwrap_or(0),
        boolean(params, "fail")?.unwrap_or(false),
        boolean(params, "ignore_cancel")?.unwrap_or(false),
    ))
}

/// Runs the handler-side decoding of `action` (by its registered name): `None` when the
/// action has no typed decoding (it reads strings only, or nothing).
pub fn check(action: &str, params: &Value) -> Option<Result<(), String>> {
    let r = match action {
        "execute_bash" => execute_bash(params).map(drop),
        "check_command" => check_command(params).map(drop),
        "get_result" => get_result(params).map(drop),
        "request_permission" => request_permission(params).map(drop),
        "infer_permissions" => infer_permissions(params).map(drop),
        "run_code" => run_code(params).map(drop),
        "sleep" => sleep(params).map(drop),
        _ => return None,
    };
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn integral_floats_are_integers_and_others_are_errors() {
        let p = json!({"a": 5.0, "b": 7, "c": 1.5, "d": "7", "e": -1, "f": 1e300});
        assert_eq!(int(&p, "a"), Ok(Some(5)));
        assert_eq!(uint(&p, "a"), Ok(Some(5)));
        assert_eq!(int(&p, "b"), Ok(Some(7)));
        assert!(int(&p, "c").is_err());
        assert!(int(&p, "d").is_err());
        assert!(uint(&p, "e").is_err());
        assert!(int(&p, "f").is_err());
        assert_eq!(int(&p, "missing"), Ok(None));
    }

    /// Found while writing the params fuzz oracle: JSON Schema's `integer` accepts `3.0`, and
    /// the handlers read it with `as_u64` / `as_i64`, which silently fell back to a default
    /// (`get_result` looked up job 0, `execute_bash` ignored the timeout, `sleep` slept 0 ms).
    #[test]
    fn what_the_schema_accepts_decodes_to_the_value_given() {
        let config = crate::config::Config {
            test_actions: true,
            ..Default::default()
        };
        let reg = super::super::Registry::new(&config).unwrap();
        let cases = [
            ("get_result", json!({"job_id": 3.0})),
            (
                "execute_bash",
                json!({"command": "ls", "timeout_ms": 2500.0}),
            ),
            ("run_code", json!({"code": "1", "timeout_ms": 40.0})),
            ("sleep", json!({"ms": 7.0})),
        ];
        for (name, params) in cases {
            let action = reg.get(name).unwrap();
            assert!(
                reg.check_params(action, &params).is_ok(),
                "{name}: {params}"
            );
            assert_eq!(check(name, &params), Some(Ok(())), "{name}: {params}");
        }
        assert_eq!(get_result(&json!({"job_id": 3.0})), Ok(3));
        assert_eq!(
            execute_bash(&json!({"command": "ls", "timeout_ms": 2500.0}))
                .unwrap()
                .timeout_ms,
            Some(2500)
        );
        assert_eq!(
            run_code(&json!({"code": "1", "timeout_ms": 40.0}))
                .unwrap()
                .2,
            Some(40)
        );
        assert_eq!(sleep(&json!({"ms": 7.0})), Ok((7, false, false)));
    }
}
