//! Arithmetic over run-time values (adversarial review finding): bash evaluates the value of
//! a variable used in arithmetic again, and a subscript in that value runs commands
//! (`x='a[$(touch /tmp/p)]'; echo $((x))` runs touch). Each context must make the command
//! dynamic (never pure, a computed program, the mcp-standard set); arithmetic over literal
//! numbers stays pure. Classification only: nothing here is ever executed.

use brainloop::classify::{check, CheckReport, Context};

const P: &str = "x='a[$(touch /tmp/p)]'";

fn c(cmd: &str) -> CheckReport {
    check(cmd, &Context::default())
}

#[test]
fn arithmetic_over_a_non_numeric_value_is_dynamic() {
    let cases: Vec<(&str, String)> = vec![
        ("arithmetic expansion", format!("{P}; echo $((x))")),
        ("arithmetic expansion with $", format!("{P}; echo $(($x))")),
        (
            "arithmetic expansion with ${}",
            format!("{P}; echo $(( ${{x}} + 1 ))"),
        ),
        ("old $[ ] form", format!("{P}; echo $[x]")),
        ("(( ))", format!("{P}; ((x))")),
        ("(( )) assignment", format!("{P}; (( y = x + 1 ))")),
        ("(( )) in if", format!("{P}; if ((x > 1)); then echo y; fi")),
        ("let", format!("{P}; let y=x")),
        ("let quoted", format!("{P}; let 'y = x * 2'")),
        ("[[ -eq ]]", format!("{P}; [[ $x -eq 1 ]] && echo y")),
        ("[[ -lt ]] bare name", format!("{P}; [[ x -lt 2 ]]")),
        ("[[ -v subscript ]]", format!("{P}; [[ -v b[x] ]]")),
        ("test -v subscript", format!("{P}; test -v 'b[x]'")),
        (
            "array subscript read",
            format!("{P}; arr=(1 2); echo ${{arr[x]}}"),
        ),
        ("array subscript write", format!("{P}; arr[x]=1")),
        ("array subscript with $", format!("{P}; arr[$x]=1")),
        ("unset subscript", format!("{P}; unset 'b[x]'")),
        ("printf -v subscript", format!("{P}; printf -v 'b[x]' %s 1")),
        ("read into subscript", format!("{P}; read 'b[x]' <<< 1")),
        ("substring offset", format!("{P}; s=hello; echo ${{s:x}}")),
        ("substring length", format!("{P}; s=hello; echo ${{s:0:x}}")),
        (
            "c-style for",
            format!("{P}; for ((i=x; i<3; i++)); do :; done"),
        ),
        ("declare -i value", format!("{P}; declare -i n=x")),
        (
            "declare -i later assignment",
            format!("{P}; declare -i n; n=$x"),
        ),
        (
            "local -i in a function",
            format!("{P}; f() {{ local -i n=$x; }}; f"),
        ),
        ("declare -i read", "declare -i n; read n".to_string()),
        (
            "declare -i for",
            "declare -i n; for n in 'a[$(touch /tmp/p)]'; do :; done".to_string(),
        ),
        (
            "never assigned (environment)",
            "echo $((HOSTNAME))".to_string(),
        ),
        ("never assigned, bare", "echo $((y + 1))".to_string()),
        ("read at run time", "read x; echo $((x))".to_string()),
        (
            "while read",
            "while read x; do echo $((x + 1)); done".to_string(),
        ),
        ("mapfile", "mapfile x; echo $((x))".to_string()),
        ("getopts", "getopts ab x; echo $((x))".to_string()),
        (
            "later in a loop",
            format!("x=1; while true; do echo $((x)); {P}; done"),
        ),
        ("only in a subshell", format!("{P}; (x=1); echo $((x))")),
        (
            "only in a dead branch",
            format!("{P}; if false; then x=1; fi; echo $((x))"),
        ),
        (
            "assigning expansion",
            "x=; : ${x:='a[$(touch /tmp/p)]'}; echo $((x))".to_string(),
        ),
        ("through another name", format!("y=x; {P}; echo $((y))")),
        (
            "export",
            "export x='a[$(touch /tmp/p)]'; echo $((x))".to_string(),
        ),
        ("append", "x=1; x+=1; echo $((x))".to_string()),
        (
            "array value",
            "x=('a[$(touch /tmp/p)]'); echo $((x))".to_string(),
        ),
        (
            "a numeric special reassigned",
            "OPTIND='a[$(touch /tmp/p)]'; echo $((OPTIND))".to_string(),
        ),
        (
            "positional of a function",
            "f() { echo $(( $1 )); }; f 'a[$(touch /tmp/p)]'".to_string(),
        ),
        (
            "positional after set",
            "set -- 'a[$(touch /tmp/p)]'; echo $(( $1 ))".to_string(),
        ),
        (
            "positional after shift",
            "f() { shift; echo $(( $1 )); }; f 1 'a[$(touch /tmp/p)]'".to_string(),
        ),
        ("command output", "echo $(( $(cat n.txt) + 1 ))".to_string()),
        ("backquoted output", "echo $(( `cat n.txt` ))".to_string()),
        ("indirect", "y=3; x=y; echo $(( ${!x} ))".to_string()),
        (
            "scoped environment of a nested shell",
            "x='a[$(touch /tmp/p)]' bash -c 'echo $((x))'".to_string(),
        ),
        ("nested shell", "bash -c 'echo $((x))'".to_string()),
        ("eval", "eval 'echo $((x))'".to_string()),
        ("case word", "case $((x)) in *) ;; esac".to_string()),
        (
            "in a double-quoted string",
            format!("{P}; echo \"n=$((x))\""),
        ),
        (
            "integer variable assigned in a nested shell",
            "bash -c 'declare -i n; read n'".to_string(),
        ),
    ];
    let mut failures = Vec::new();
    for (name, cmd) in &cases {
        let r = c(cmd);
        let dynamic_op = r.operations.iter().any(|o| o.op == "bash:<dynamic>");
        if !r.valid
            || r.pure
            || !r.computed_program
            || !dynamic_op
            || r.permission_set != "mcp-standard"
        {
            failures.push(format!(
                "{name}: `{cmd}` valid={} pure={} computed={} dynamic_op={dynamic_op} set={}",
                r.valid, r.pure, r.computed_program, r.permission_set
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn arithmetic_over_literal_numbers_stays_pure() {
    let cases = [
        "echo $((1 + 2))",
        "echo $[1 + 2]",
        "x=5; echo $((x * 2))",
        "x=5; echo $(($x * 2))",
        "x=0x1f; y=16#ff; echo $((x + y))",
        "x=5; ((x++)); echo $x",
        "((n = 3)); echo $((n * 2))",
        "for ((i=0; i<3; i++)); do echo $((i * 2)); done",
        "for i in 1 2 3; do echo $((i + 1)); done",
        "n=3; [[ $n -gt 2 ]] && echo big",
        "arr=(a b c); echo ${arr[1]}",
        "arr=(a b c); i=2; echo ${arr[i]}",
        "arr=(a b c); echo \"${arr[@]}\" ${#arr[@]}",
        "s=hello; echo ${s:1:3}",
        "s=hello; n=1; echo ${s:n}",
        "echo $((RANDOM % 6))",
        "echo $(( $# + $? ))",
        "declare -A m; m[key]=v; echo ${m[key]}",
        "let x=1+2; echo $x",
        "declare -i n=5; n=n+1; echo $n",
    ];
    let mut failures = Vec::new();
    for cmd in cases {
        let r = c(cmd);
        if !r.pure {
            failures.push(format!("`{cmd}`: {:?}", r.reasons));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// An unquoted heredoc expands `$((x))` too: the classifier does not see the expansion as a
/// node there, but the command is never pure nor in a confined-only set.
#[test]
fn heredoc_arithmetic_is_never_pure() {
    let r = c("cat <<EOF\n$((x))\nEOF");
    assert!(
        r.valid && !r.pure && r.permission_set == "mcp-standard",
        "{:?}",
        r.reasons
    );
}
