//! Property tests for plans by shape (`foldgate::fold::plan_call`): any
//! tool call whose arguments hold a non-empty list of objects, each with a
//! text and a `status` string, is a plan — whatever the tool, the list's
//! key, the text's key, the statuses, the extra fields, their order and
//! whether the arguments come as a JSON text or an object. Near misses
//! (an item without status, a status that is not a string, an item with
//! no text, an item that is not an object, a list of strings, an empty
//! list) are not. `policy.plan_tools`, set, decides by name alone.
//!
//! Seeded for reproducible CI; explore others with
//! `PROPTEST_RNG_SEED=<u64> cargo nextest run -E 'test(/plan_props/)'`.

use crate::props_support;
use foldgate::config::Policy;
use foldgate::fold::PlanCall;
use foldgate::fold::plan_call::{is_plan, is_plan_call};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// A field name; never `status` or `id` (those are not an item's text).
fn key() -> impl Strategy<Value = String> {
    "[a-zA-Z_][a-zA-Z0-9_]{0,10}".prop_filter("not status or id", |k| k != "status" && k != "id")
}

fn tool() -> impl Strategy<Value = String> {
    "[a-zA-Z_][a-zA-Z0-9_.-]{0,20}"
}

/// A value that is not a list: scalars and flat objects.
fn leaf() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,12}".prop_map(Value::from),
    ];
    prop_oneof![
        3 => scalar.clone(),
        1 => prop::collection::vec((key(), scalar), 0..3)
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
    ]
}

/// A status that is not a string.
fn not_a_string() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        Just(json!(["completed"])),
        Just(json!({"state": "pending"})),
    ]
}

/// A plan item: a text under a random key, a status, extra fields, in a
/// random order.
fn item() -> impl Strategy<Value = Value> {
    (
        key(),
        "\\PC{0,20}",
        "\\PC{0,12}",
        prop::collection::vec((key(), leaf()), 0..3),
        any::<bool>(),
    )
        .prop_flat_map(|(text_key, text, status, extras, with_id)| {
            let mut fields: Vec<(String, Value)> =
                extras.into_iter().filter(|(k, _)| *k != text_key).collect();
            fields.push((text_key, Value::String(text)));
            fields.push(("status".into(), Value::String(status)));
            if with_id {
                fields.push(("id".into(), json!("1")));
            }
            Just(fields).prop_shuffle()
        })
        .prop_map(|fields| Value::Object(fields.into_iter().collect()))
}

/// Plan arguments: a list of items under a random key, among other fields
/// that are not lists.
fn plan() -> impl Strategy<Value = (String, Map<String, Value>)> {
    (
        key(),
        prop::collection::vec(item(), 1..5),
        prop::collection::vec((key(), leaf()), 0..3),
    )
        .prop_map(|(list_key, items, others)| {
            let mut args: Map<String, Value> = others.into_iter().collect();
            args.insert(list_key.clone(), Value::Array(items));
            (list_key, args)
        })
}

/// How a near miss breaks a plan's list (at item `at`).
#[derive(Debug, Clone)]
enum Miss {
    NoStatus,
    Status(Value),
    NoText,
    NotAnObject(Value),
    Strings(Vec<String>),
    Empty,
}

fn miss() -> impl Strategy<Value = Miss> {
    prop_oneof![
        Just(Miss::NoStatus),
        not_a_string().prop_map(Miss::Status),
        Just(Miss::NoText),
        prop_oneof![
            "\\PC{0,12}".prop_map(Value::from),
            any::<i64>().prop_map(Value::from)
        ]
        .prop_map(Miss::NotAnObject),
        prop::collection::vec("\\PC{0,12}", 1..4).prop_map(Miss::Strings),
        Just(Miss::Empty),
    ]
}

/// `list` broken as `miss` says, at item `at`.
fn broken(list: &mut Vec<Value>, miss: Miss, at: prop::sample::Index) {
    let i = at.index(list.len());
    match miss {
        Miss::NoStatus => {
            list[i].as_object_mut().unwrap().remove("status");
        }
        Miss::Status(status) => list[i]["status"] = status,
        Miss::NoText => {
            // Only the status, the id and fields that are not strings stay.
            list[i]
                .as_object_mut()
                .unwrap()
                .retain(|k, v| k == "status" || k == "id" || !v.is_string());
        }
        Miss::NotAnObject(value) => list[i] = value,
        Miss::Strings(strings) => *list = strings.into_iter().map(Value::from).collect(),
        Miss::Empty => list.clear(),
    }
}

/// The arguments as a call carries them: a JSON text, or an object.
fn sent(args: &Map<String, Value>, as_text: bool) -> Value {
    let object = Value::Object(args.clone());
    if as_text {
        Value::String(object.to_string())
    } else {
        object
    }
}

fn call(tool: &str, arguments: Value) -> Value {
    json!({"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": tool, "arguments": arguments}}]})
}

proptest! {
    #![proptest_config(props_support::config(512, 0x91a2_5eed))]

    #[test]
    fn every_list_of_items_with_a_text_and_a_status_is_a_plan(
        (_, args) in plan(),
        tool in tool(),
        as_text in any::<bool>(),
    ) {
        let policy = Policy::default();
        let arguments = sent(&args, as_text);
        prop_assert!(is_plan(&Value::Object(args.clone())));
        prop_assert!(is_plan_call(&tool, Some(&arguments), &policy));
        // Found among other calls, its arguments as sent.
        let messages = [
            call(&tool, arguments.clone()),
            call("bash", json!(r#"{"command": "git status"}"#)),
            json!({"role": "tool", "tool_call_id": "c", "content": "ok"}),
        ];
        let newest = PlanCall::newest(messages.iter(), &policy).unwrap();
        let verbatim = arguments.as_str().map_or_else(|| arguments.to_string(), str::to_owned);
        prop_assert_eq!((newest.tool, newest.arguments), (tool, verbatim));
    }

    #[test]
    fn near_misses_are_not_plans(
        (list_key, mut args) in plan(),
        miss in miss(),
        at in any::<prop::sample::Index>(),
        tool in tool(),
        as_text in any::<bool>(),
    ) {
        let list = args.get_mut(&list_key).and_then(Value::as_array_mut).unwrap();
        broken(list, miss, at);
        let policy = Policy::default();
        prop_assert!(!is_plan(&Value::Object(args.clone())), "{:?}", args);
        prop_assert!(!is_plan_call(&tool, Some(&sent(&args, as_text)), &policy));
    }

    #[test]
    fn plan_tools_set_decides_by_name_alone(
        (_, args) in plan(),
        tool in tool(),
        others in prop::collection::vec(tool(), 0..3),
    ) {
        let arguments = sent(&args, true);
        let listed = |names: Vec<String>| Policy {
            plan_tools: Some(names.into()),
            ..Policy::default()
        };
        let without: Vec<String> = others.iter().filter(|o| **o != tool).cloned().collect();
        prop_assert!(!is_plan_call(&tool, Some(&arguments), &listed(without.clone())));
        let mut with = without;
        with.push(tool.clone());
        prop_assert!(is_plan_call(&tool, Some(&json!("not a plan")), &listed(with)));
    }
}
