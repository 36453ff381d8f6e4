// brainloop run_code prelude: evaluated once per run, before the agent's code, in a fresh
// QuickJS context. It captures the built-ins it relies on (so later tampering by the agent's
// code cannot redirect it), removes what could block or reach outside, installs `mcp`,
// `console`, a seeded `Math.random` and a recorded clock, and returns the call-site function
// the instrumented code calls (see instrument.rs). `host` holds the Rust functions; it is not
// reachable from the agent's code afterwards.
(function (host) {
  "use strict";
  const G = globalThis;
  const apply = Reflect.apply;
  const construct = Reflect.construct;
  const defineProperty = Object.defineProperty;
  const create = Object.create;
  const freeze = Object.freeze;
  const jsonStringify = JSON.stringify;
  const wmGet = WeakMap.prototype.get;
  const wmSet = WeakMap.prototype.set;
  const arrayJoin = Array.prototype.join;
  const imul = Math.imul;
  const String_ = String;
  const ProxyC = Proxy;
  const PromiseC = Promise;
  const TypeErrorC = TypeError;
  const RealDate = Date;
  const dateToString = Date.prototype.toString;
  const hostCall = host.call, hostLog = host.log, hostNow = host.now;
  let seed = host.seed | 0;

  // Nothing that can block the thread, load code, or measure time unrecorded.
  for (const k of ["Atomics", "SharedArrayBuffer", "WebAssembly", "performance", "gc", "print",
                   "os", "std", "scriptArgs", "__loadScript", "setTimeout", "setInterval",
                   "clearTimeout", "clearInterval", "fetch", "require", "process", "Deno",
                   "Bun", "navigator", "importScripts", "Worker"]) {
    try { delete G[k]; } catch (_) { /* non-configurable: left as is */ }
  }

  const hidden = (obj, name, value) =>
    defineProperty(obj, name, { value, writable: false, enumerable: false, configurable: false });

  // --- mcp.<tool>.<op>(args) -------------------------------------------------------------
  const bridge = new WeakMap();
  const tools = create(null);
  function invoke(tool, op, site, args) {
    if (args.length > 1) {
      return PromiseC.reject(new TypeErrorC(`mcp.${tool}.${op} takes one object argument`));
    }
    let params = args.length === 0 || args[0] === undefined ? {} : args[0];
    let text;
    try { text = jsonStringify(params); } catch (e) {
      return PromiseC.reject(new TypeErrorC(`the argument of mcp.${tool}.${op} is not JSON: ${e && e.message}`));
    }
    if (typeof text !== "string" || text[0] !== "{") {
      return PromiseC.reject(new TypeErrorC(`the argument of mcp.${tool}.${op} must be an object`));
    }
    return new PromiseC((resolve, reject) => hostCall(tool, op, site, text, resolve, reject));
  }
  function toolObject(tool) {
    const ops = create(null);
    return new ProxyC(create(null), {
      __proto__: null,
      get(_, op) {
        if (typeof op !== "string" || op === "then") return undefined;
        let f = ops[op];
        if (f === undefined) {
          f = function (...args) { return invoke(tool, op, -1, args); };
          apply(wmSet, bridge, [f, [tool, op]]);
          ops[op] = f;
        }
        return f;
      },
      set() { return false; },
      defineProperty() { return false; },
      deleteProperty() { return false; },
    });
  }
  const mcp = new ProxyC(create(null), {
    __proto__: null,
    get(_, tool) {
      if (typeof tool !== "string" || tool === "then") return undefined;
      let t = tools[tool];
      if (t === undefined) { t = toolObject(tool); tools[tool] = t; }
      return t;
    },
    set() { return false; },
    defineProperty() { return false; },
    deleteProperty() { return false; },
  });
  hidden(G, "mcp", mcp);

  // --- console ---------------------------------------------------------------------------
  const show = (v) => {
    if (typeof v === "string") return v;
    try {
      const s = jsonStringify(v);
      return s === undefined ? String_(v) : s;
    } catch (_) {
      try { return String_(v); } catch (_) { return "[unprintable]"; }
    }
  };
  const printer = (level) => function (...a) {
    const parts = [];
    for (let i = 0; i < a.length; i++) parts[i] = show(a[i]);
    hostLog(level, apply(arrayJoin, parts, [" "]));
  };
  const console_ = create(null);
  for (const l of ["log", "info", "warn", "error", "debug"]) console_[l] = printer(l);
  hidden(G, "console", freeze(console_));

  // --- determinism: seeded Math.random, recorded clock ------------------------------------
  defineProperty(Math, "random", {
    value: function random() {
      seed = (seed + 0x6D2B79F5) | 0;
      let t = imul(seed ^ (seed >>> 15), 1 | seed);
      t = (t + imul(t ^ (t >>> 7), 61 | t)) ^ t;
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    },
    writable: true, enumerable: false, configurable: true,
  });
  const now = () => hostNow();
  const DateP = new ProxyC(RealDate, {
    __proto__: null,
    construct(t, args, nt) { return construct(t, args.length === 0 ? [now()] : args, nt); },
    apply() { return apply(dateToString, new RealDate(now()), []); },
  });
  defineProperty(RealDate, "now", { value: function now_() { return now(); }, writable: true, enumerable: false, configurable: true });
  defineProperty(RealDate.prototype, "constructor", { value: DateP, writable: true, enumerable: false, configurable: true });
  defineProperty(G, "Date", { value: DateP, writable: true, enumerable: false, configurable: true });

  // --- the call-site function (instrument.rs) ----------------------------------------------
  return function site(id, member, a, b, args) {
    const f = member ? a[b] : a;
    const info = typeof f === "function" ? apply(wmGet, bridge, [f]) : undefined;
    if (info !== undefined) return invoke(info[0], info[1], id, args);
    return apply(f, member ? a : undefined, args);
  };
})
