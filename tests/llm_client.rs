//! The LLM client against a local mock server speaking Cerebras's wire format: streaming,
//! streams without `[DONE]`, mid-stream errors, flat error bodies, 429 with retry hints, 5xx
//! retries exhausted, stalls, cancellation, budgets, no key, the models check, metrics; and
//! today's API (issue 51): reasoning apart from the answer, non-streamed replies with tool
//! calls, json_schema replies used or retried once then refused naming the field, each error
//! status mapped to its cause, the limiter waiting on the reset a header gave.
//! Everything stays on 127.0.0.1.

mod common;

use brainloop::llm::key::{ApiKey, Found, KeySource};
use brainloop::llm::{JobUsage, Llm, LlmConfig, LlmError, Prompt};
use brainloop::stats::Stats;
use common::mock_llm::{rate_headers, MockLlm, Reply, TODAY};
use serde_json::json;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn cfg(mock: &MockLlm) -> LlmConfig {
    LlmConfig {
        base_url: mock.base_url(),
        retry_base_ms: 10,
        retry_max_ms: 50,
        max_retries: 3,
        stall_timeout_ms: 2_000,
        request_timeout_ms: 20_000,
        tokens_per_minute: 0,
        ..LlmConfig::default()
    }
}

fn llm(c: &LlmConfig) -> Llm {
    Llm::new(
        c,
        Found::Key(ApiKey::new("test-key").unwrap(), KeySource::Env),
        None,
    )
}

fn prompt() -> Prompt {
    Prompt {
        system: "You are a test.".into(),
        user: "Say hello.".into(),
        temperature: 0.1,
        action: "test",
    }
}

async fn call(l: &Llm, stats: &Stats) -> Result<brainloop::llm::Answer, LlmError> {
    l.complete(
        &JobUsage::default(),
        &prompt(),
        stats,
        &CancellationToken::new(),
    )
    .await
}

fn metric(stats: &Stats, name: &str) -> Vec<f64> {
    stats
        .take_metrics(0)
        .into_iter()
        .filter(|m| m.name == name)
        .map(|m| m.value)
        .collect()
}

#[tokio::test]
async fn a_streamed_completion_its_request_and_its_metrics() {
    let mock = MockLlm::script(vec![Reply::text("Hello, streaming world!")]);
    let c = cfg(&mock);
    let l = llm(&c);
    let stats = Stats::default();
    let a = call(&l, &stats).await.unwrap();
    assert_eq!(a.text, "Hello, streaming world!");
    assert_eq!(a.finish_reason.as_deref(), Some("stop"));
    assert_eq!((a.usage.prompt_tokens, a.usage.completion_tokens), (10, 5));
    assert!(!a.usage_estimated && a.time_info.is_some() && a.attempts == 1);
    let req = &mock.chats()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.header("authorization"), Some("Bearer test-key"));
    assert_eq!(req.body["model"], "gpt-oss-120b");
    assert_eq!(req.body["stream"], true);
    assert!((req.body["temperature"].as_f64().unwrap() - 0.1).abs() < 1e-6);
    assert!(req.body["max_completion_tokens"].as_u64().unwrap() > 0);
    assert!(req.body.get("max_tokens").is_none());
    let m = stats.take_metrics(0);
    let get = |n: &str| {
        m.iter()
            .filter(|x| x.name == n)
            .map(|x| x.value)
            .collect::<Vec<_>>()
    };
    assert_eq!(get("cerebras_tokens_prompt"), vec![10.0]);
    assert_eq!(get("cerebras_tokens_completion"), vec![5.0]);
    let lat: Vec<_> = m
        .iter()
        .filter(|x| x.name == "cerebras_latency_ms")
        .collect();
    assert_eq!(lat.len(), 2, "total and first token: {lat:?}");
    assert!(lat
        .iter()
        .any(|x| x.labels.as_deref().unwrap_or("").contains("first_token")));
}

#[tokio::test]
async fn a_stream_without_done_is_complete() {
    let mock = MockLlm::script(vec![Reply::text_no_done("no done marker")]);
    let l = llm(&cfg(&mock));
    let a = call(&l, &Stats::default()).await.unwrap();
    assert_eq!(a.text, "no done marker");
}

#[tokio::test]
async fn mid_stream_errors_retry_when_transient_and_fail_otherwise() {
    let mock = MockLlm::script(vec![Reply::mid_stream_error(503), Reply::text("recovered")]);
    let l = llm(&cfg(&mock));
    let stats = Stats::default();
    let a = call(&l, &stats).await.unwrap();
    assert_eq!(a.text, "recovered");
    assert_eq!(a.attempts, 2);
    assert_eq!(metric(&stats, "cerebras_retries"), vec![1.0]);

    let mock = MockLlm::script(vec![Reply::mid_stream_error(400)]);
    let l = llm(&cfg(&mock));
    let e = call(&l, &Stats::default()).await.unwrap_err();
    assert!(matches!(e, LlmError::Api { status: 400, .. }), "{e:?}");
    assert!(e.to_string().contains("overloaded"), "{e}");
    assert_eq!(mock.chats().len(), 1, "a client error is not retried");
}

#[tokio::test]
async fn flat_error_bodies_are_reported_and_not_retried() {
    let mock = MockLlm::script(vec![Reply::error(404, "Model zai-glm-9 does not exist")]);
    let l = llm(&cfg(&mock));
    let e = call(&l, &Stats::default()).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("404")
            && msg.contains("Model zai-glm-9 does not exist")
            && msg.contains("invalid_request_error"),
        "{msg}"
    );
    assert_eq!(mock.chats().len(), 1);
}

#[tokio::test]
async fn a_429_with_retry_after_then_success() {
    let mock = MockLlm::script(vec![Reply::rate_limited(80), Reply::text("after the wait")]);
    let l = llm(&cfg(&mock));
    let t = std::time::Instant::now();
    let a = call(&l, &Stats::default()).await.unwrap();
    assert_eq!(a.text, "after the wait");
    assert_eq!(mock.chats().len(), 2);
    assert!(
        t.elapsed() >= Duration::from_millis(80),
        "retry-after-ms honoured"
    );
}

#[tokio::test]
async fn a_retry_after_beyond_the_limit_gives_up_at_once() {
    let mock = MockLlm::script(vec![Reply::rate_limited(3_600_000)]);
    let l = llm(&cfg(&mock));
    let e = call(&l, &Stats::default()).await.unwrap_err();
    assert!(matches!(e, LlmError::RateLimited(_)), "{e:?}");
    assert!(e.to_string().contains("max_retry_wait_ms"), "{e}");
    assert_eq!(mock.chats().len(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_until_exhausted() {
    let mock = MockLlm::script(vec![Reply::Status {
        status: 500,
        headers: vec![],
        body: r#"{"message":"Internal server error","type":"server_error","param":"","code":"internal"}"#.into(),
    }]);
    let c = cfg(&mock);
    let l = llm(&c);
    let stats = Stats::default();
    let e = call(&l, &stats).await.unwrap_err();
    assert!(matches!(e, LlmError::Api { status: 500, .. }), "{e:?}");
    assert!(e.to_string().contains("gave up after 4 attempts"), "{e}");
    assert_eq!(mock.chats().len(), 4, "1 + max_retries");
    assert_eq!(metric(&stats, "cerebras_errors"), vec![1.0]);
}

#[tokio::test]
async fn connection_errors_and_hangups_are_retried() {
    let mock = MockLlm::script(vec![Reply::Hangup, Reply::text("second try")]);
    let l = llm(&cfg(&mock));
    assert_eq!(
        call(&l, &Stats::default()).await.unwrap().text,
        "second try"
    );
    // Nothing listens: a transport error after the retries.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = dead.local_addr().unwrap().port();
    drop(dead);
    let c = LlmConfig {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        max_retries: 1,
        retry_base_ms: 1,
        retry_max_ms: 2,
        ..LlmConfig::default()
    };
    let e = call(&llm(&c), &Stats::default()).await.unwrap_err();
    assert!(matches!(e, LlmError::Transport(_)), "{e:?}");
}

#[tokio::test]
async fn malformed_chunks_fail_clearly() {
    let mock = MockLlm::script(vec![Reply::Stream {
        pieces: vec![
            common::mock_llm::chunk("ok "),
            "data: {this is not json\n\n".into(),
        ],
        stall: false,
        headers: vec![],
    }]);
    let e = call(&llm(&cfg(&mock)), &Stats::default())
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::Malformed(_)), "{e:?}");
}

#[tokio::test]
async fn a_stalled_stream_times_out_and_is_retried() {
    let mock = MockLlm::script(vec![Reply::stall(), Reply::text("fresh stream")]);
    let c = LlmConfig {
        stall_timeout_ms: 300,
        ..cfg(&mock)
    };
    let a = call(&llm(&c), &Stats::default()).await.unwrap();
    assert_eq!(a.text, "fresh stream");
    let mock = MockLlm::script(vec![Reply::stall()]);
    let c = LlmConfig {
        stall_timeout_ms: 200,
        max_retries: 0,
        ..cfg(&mock)
    };
    let e = call(&llm(&c), &Stats::default()).await.unwrap_err();
    assert_eq!(e, LlmError::Stalled(200));
}

#[tokio::test]
async fn cancellation_stops_a_call_in_flight() {
    let mock = MockLlm::script(vec![Reply::stall()]);
    let c = LlmConfig {
        stall_timeout_ms: 60_000,
        ..cfg(&mock)
    };
    let l = llm(&c);
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        c2.cancel();
    });
    let e = l
        .complete(&JobUsage::default(), &prompt(), &Stats::default(), &cancel)
        .await
        .unwrap_err();
    assert_eq!(e, LlmError::Cancelled);
}

#[tokio::test]
async fn budgets_stop_before_anything_is_sent() {
    let mock = MockLlm::script(vec![Reply::text("fine")]);
    let c = LlmConfig {
        job_token_budget: 50,
        ..cfg(&mock)
    };
    let e = call(&llm(&c), &Stats::default()).await.unwrap_err();
    assert!(
        matches!(e, LlmError::Budget(ref m) if m.contains("per-job token budget")),
        "{e:?}"
    );
    assert!(mock.chats().is_empty());

    // Daily: the first call fits, its usage counts, the next one does not.
    let c = LlmConfig {
        daily_token_budget: 200,
        max_completion_tokens: 100,
        ..cfg(&mock)
    };
    let l = llm(&c);
    let job = JobUsage::default();
    let stats = Stats::default();
    let cancel = CancellationToken::new();
    l.complete(&job, &prompt(), &stats, &cancel).await.unwrap();
    assert_eq!(l.used_today(), 15);
    assert_eq!(job.used(), 15);
    let big = Prompt {
        user: "x".repeat(600),
        ..prompt()
    };
    let e = l.complete(&job, &big, &stats, &cancel).await.unwrap_err();
    assert!(
        matches!(e, LlmError::Budget(ref m) if m.contains("daily token budget")),
        "{e:?}"
    );
    assert_eq!(mock.chats().len(), 1);
    // The request asked no more than the budget left.
    assert!(
        mock.chats()[0].body["max_completion_tokens"]
            .as_u64()
            .unwrap()
            <= 100
    );
}

#[tokio::test]
async fn without_a_key_calls_fail_naming_the_variable() {
    let mock = MockLlm::script(vec![Reply::text("unused")]);
    let l = Llm::new(&cfg(&mock), Found::None, None);
    let e = call(&l, &Stats::default()).await.unwrap_err();
    assert!(e.to_string().contains("CEREBRAS_API_KEY"), "{e}");
    let check = l.check_models(&CancellationToken::new()).await;
    assert!(!check.ok && check.error.unwrap().contains("CEREBRAS_API_KEY"));
    assert!(mock.seen().is_empty(), "nothing is sent without a key");
}

#[tokio::test]
async fn the_models_check() {
    let mock = MockLlm::script(vec![Reply::text("unused")]);
    let c = cfg(&mock);
    let check = llm(&c).check_models(&CancellationToken::new()).await;
    assert!(check.ok, "{check:?}");
    assert_eq!(check.key_source.as_deref(), Some("$CEREBRAS_API_KEY"));
    let c = LlmConfig {
        model: "not-served".into(),
        ..c
    };
    let check = llm(&c).check_models(&CancellationToken::new()).await;
    assert!(!check.ok);
    assert!(check.error.unwrap().contains("not served"));
    assert!(check.served.contains(&"gpt-oss-120b".to_string()));
}

#[tokio::test]
async fn the_tokens_per_minute_limit_holds_a_request_back() {
    let mock = MockLlm::script(vec![Reply::text("a")]);
    let c = LlmConfig {
        tokens_per_minute: 300,
        max_completion_tokens: 200,
        request_timeout_ms: 300,
        ..cfg(&mock)
    };
    let l = llm(&c);
    let stats = Stats::default();
    // The first reserves ~220 tokens and settles to its usage (15): the second fits.
    call(&l, &stats).await.unwrap();
    call(&l, &stats).await.unwrap();
    assert_eq!(mock.chats().len(), 2);
    // A third concurrent reservation beyond the limit would wait; with a short deadline it
    // gives up without sending.
    let job = JobUsage::default();
    let cancel = CancellationToken::new();
    let big = Prompt {
        user: "y".repeat(600),
        ..prompt()
    };
    let e = l.complete(&job, &big, &stats, &cancel).await.unwrap_err();
    assert!(matches!(e, LlmError::RateLimited(_)), "{e:?}");
    assert_eq!(mock.chats().len(), 2);
}

fn digest_schema() -> brainloop::llm::JsonSchema {
    brainloop::llm::JsonSchema {
        name: "answer",
        schema: json!({"type": "object", "required": ["sql"], "additionalProperties": false,
                       "properties": {"sql": {"type": "string", "minLength": 1}}}),
    }
}

#[tokio::test]
async fn reasoning_comes_apart_from_the_answer_in_the_field_and_in_think_blocks() {
    let mock = MockLlm::script(vec![
        Reply::reasoning("first I plan", "the answer"),
        Reply::text("<think>secret plan</think>SELECT 1;"),
        Reply::whole("whole answer", Some("whole plan"), None),
    ]);
    let l = llm(&cfg(&mock));
    let stats = Stats::default();
    let a = call(&l, &stats).await.unwrap();
    assert_eq!(
        (a.text.as_str(), a.reasoning.as_str()),
        ("the answer", "first I plan")
    );
    assert_eq!(a.usage.reasoning_tokens(), 7);
    let b = call(&l, &stats).await.unwrap();
    assert_eq!(
        (b.text.as_str(), b.reasoning.as_str()),
        ("SELECT 1;", "secret plan")
    );
    let c = call(&l, &stats).await.unwrap();
    assert_eq!(
        (c.text.as_str(), c.reasoning.as_str()),
        ("whole answer", "whole plan")
    );
    let r: Vec<_> = stats
        .take_metrics(0)
        .into_iter()
        .filter(|m| m.name == "brainloop.llm.reasoning_tokens")
        .collect();
    assert_eq!(r.len(), 1, "{r:?}");
    // The default model's reasoning parameters; nothing the API refuses.
    let req = &mock.chats()[0];
    assert_eq!(req.body["reasoning_effort"], "medium");
    assert_eq!(req.body["reasoning_format"], "parsed");
    assert_eq!(
        req.header("x-cerebras-3rd-party-integration"),
        Some("brainloop")
    );
    for k in [
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "parallel_tool_calls",
        "service_tier",
    ] {
        assert!(req.body.get(k).is_none(), "{k}");
    }
}

#[tokio::test]
async fn a_refused_reasoning_value_is_corrected_with_a_warning_not_a_failed_call() {
    let mock = MockLlm::script(vec![Reply::text("ok")]);
    let c = LlmConfig {
        reasoning_effort: Some("none".into()),
        ..cfg(&mock)
    };
    let l = llm(&c);
    assert_eq!(
        l.reasoning_warnings().len(),
        1,
        "{:?}",
        l.reasoning_warnings()
    );
    call(&l, &Stats::default()).await.unwrap();
    assert_eq!(mock.chats()[0].body["reasoning_effort"], "medium");
    // Qwen takes none and gets no strict tools.
    let c = LlmConfig {
        model: "qwen-3.8-27b".into(),
        reasoning_effort: Some("none".into()),
        ..cfg(&mock)
    };
    let l = llm(&c);
    assert!(l.reasoning_warnings().is_empty());
    let conv = brainloop::llm::Conversation {
        messages: vec![brainloop::llm::Message::user("hi")],
        tools: vec![
            json!({"type": "function", "function": {"name": "f", "strict": true, "parameters": {"type": "object", "properties": {}}}}),
        ],
        temperature: 0.2,
        max_completion_tokens: None,
        action: "test",
        response_format: None,
    };
    l.converse(
        &JobUsage::default(),
        &conv,
        &Stats::default(),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let req = mock.chats().last().unwrap().clone();
    assert_eq!(req.body["reasoning_effort"], "none");
    assert!(
        req.body["tools"][0]["function"].get("strict").is_none(),
        "{}",
        req.body
    );
    assert_eq!(req.body["tool_choice"], "auto");
}

#[tokio::test]
async fn a_non_streamed_reply_with_tool_calls_is_read() {
    let calls = json!([{"id": "c1", "type": "function", "function": {"name": "run_command", "arguments": "{\"command\":\"ls\"}"}}]);
    let mock = MockLlm::script(vec![Reply::whole("", None, Some(calls))]);
    let l = llm(&cfg(&mock));
    let a = call(&l, &Stats::default()).await.unwrap();
    assert_eq!(a.tool_calls.len(), 1);
    assert_eq!(a.tool_calls[0].function.name, "run_command");
    assert_eq!(a.finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn a_json_schema_reply_is_used_and_a_malformed_one_retried_once_then_refused_naming_the_field(
) {
    let mock = MockLlm::script(vec![Reply::json(&json!({"sql": "SELECT 1;"}))]);
    let l = llm(&cfg(&mock));
    let cancel = CancellationToken::new();
    let s = l
        .complete_json(
            &JobUsage::default(),
            &prompt(),
            &digest_schema(),
            &Stats::default(),
            &cancel,
        )
        .await
        .unwrap();
    assert_eq!(s.value.unwrap()["sql"], "SELECT 1;");
    let rf = &mock.chats()[0].body["response_format"];
    assert_eq!(rf["type"], "json_schema");
    assert_eq!(rf["json_schema"]["name"], "answer");
    assert_eq!(rf["json_schema"]["strict"], true);
    assert!(rf["json_schema"]["schema"]["properties"]["sql"]
        .get("minLength")
        .is_none());

    // Malformed, then right: used, after one more request that names the field.
    let mock = MockLlm::script(vec![
        Reply::json(&json!({"sql": 7})),
        Reply::json(&json!({"sql": "SELECT 2;"})),
    ]);
    let l = llm(&cfg(&mock));
    let s = l
        .complete_json(
            &JobUsage::default(),
            &prompt(),
            &digest_schema(),
            &Stats::default(),
            &cancel,
        )
        .await
        .unwrap();
    assert_eq!(s.value.unwrap()["sql"], "SELECT 2;");
    assert_eq!(s.answer.usage.prompt_tokens, 20, "both calls counted");
    let second = mock.chats()[1].prompt();
    assert!(second.contains("field /sql"), "{second}");

    // Malformed twice: refused naming the field.
    let mock = MockLlm::script(vec![Reply::json(&json!({"query": "SELECT 1;"}))]);
    let l = llm(&cfg(&mock));
    let e = l
        .complete_json(
            &JobUsage::default(),
            &prompt(),
            &digest_schema(),
            &Stats::default(),
            &cancel,
        )
        .await
        .unwrap_err();
    assert!(matches!(e, LlmError::Schema { .. }), "{e:?}");
    let m = e.to_string();
    assert!(m.contains("field /") && m.contains("sql"), "{m}");
    assert_eq!(mock.chats().len(), 2);

    // A model without structured outputs: no response_format, the text for the caller.
    let mock = MockLlm::script(vec![Reply::text("SELECT 3;")]);
    let c = LlmConfig {
        model: "my-local-model".into(),
        ..cfg(&mock)
    };
    let l = llm(&c);
    let s = l
        .complete_json(
            &JobUsage::default(),
            &prompt(),
            &digest_schema(),
            &Stats::default(),
            &cancel,
        )
        .await
        .unwrap();
    assert!(s.value.is_none());
    assert_eq!(s.answer.text, "SELECT 3;");
    assert!(mock.chats()[0].body.get("response_format").is_none());
}

#[tokio::test]
async fn each_error_status_names_its_cause_and_a_404_names_the_served_models() {
    for (status, words) in [
        (400, "parameter or value this model does not take"),
        (401, "CEREBRAS_API_KEY"),
        (402, "payment required"),
        (403, "not allowed this model"),
        (422, "unprocessable"),
        (500, "internal error"),
        (503, "overloaded"),
    ] {
        let reply = if status == 402 {
            Reply::payment_required()
        } else {
            Reply::error(status, "m")
        };
        let mock = MockLlm::script(vec![reply]);
        let c = LlmConfig {
            max_retries: 0,
            ..cfg(&mock)
        };
        let e = call(&llm(&c), &Stats::default()).await.unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains(&status.to_string()) && m.contains(words),
            "{status}: {m}"
        );
    }
    // A model the key cannot use: 404, mapped to the served list and the config line.
    let mock = MockLlm::serving(TODAY, |_| Reply::text("unused"));
    let c = LlmConfig {
        model: "zai-glm-4.6".into(),
        ..cfg(&mock)
    };
    let e = call(&llm(&c), &Stats::default()).await.unwrap_err();
    assert!(matches!(e, LlmError::ModelNotServed { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("served: gpt-oss-120b, qwen-3.8-27b")
            && m.contains("[llm] model = \"gpt-oss-120b\""),
        "{m}"
    );
}

#[tokio::test]
async fn the_limiter_waits_on_the_reset_a_header_gave_and_fails_past_the_wait_limit() {
    // The first answer says 100 tokens are left this minute, refilled in 1.5 s: the next
    // request (charged input + max_completion_tokens up front) waits for the reset.
    let mock = MockLlm::script(vec![
        Reply::text("first").with_headers(rate_headers(100, "1.5")),
        Reply::text("second").with_headers(rate_headers(50_000, "30.5")),
    ]);
    let l = llm(&cfg(&mock));
    let stats = Stats::default();
    call(&l, &stats).await.unwrap();
    let t = std::time::Instant::now();
    let a = call(&l, &stats).await.unwrap();
    assert_eq!(a.text, "second");
    assert!(
        t.elapsed() >= Duration::from_millis(1_400),
        "{:?}",
        t.elapsed()
    );

    // A day bucket exhausted: the job fails at once with the bucket and its reset.
    let mut day = rate_headers(50_000, "30.5");
    for (k, v) in day.iter_mut() {
        if k == "x-ratelimit-remaining-requests-day" {
            *v = "0".into();
        }
    }
    let mock = MockLlm::script(vec![Reply::text("first").with_headers(day)]);
    let l = llm(&cfg(&mock));
    call(&l, &stats).await.unwrap();
    let e = call(&l, &stats).await.unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(e, LlmError::RateLimited(_)) && m.contains("requests-day") && m.contains("86399"),
        "{m}"
    );
    assert_eq!(mock.chats().len(), 1, "nothing sent past the limit");
}
