//! The built `.wasm` run outside Envoy, in an interpreter (wasmi), against an in-memory
//! proxy-wasm 0.2.1 host that logs every host call the module makes. Tests assert the call
//! sequence of whole requests (as Kuadrant's wasm-shim does with its test framework): what the
//! shipped module, not its native build, asks of Envoy.
//!
//! One `Vm` holds both roles as two instances of the module in one store, sharing what Envoy
//! shares between them: the request's headers and filter state, and the VM's shared data. A call
//! the host does not implement traps (the callback fails: it never gets an answer the host did
//! not give, nor unwritten out-pointers) and is kept in a log no `take_calls` drains
//! (`unimplemented()`); a trap (a panic in the module) is an error of the callback.

use std::collections::HashMap;
use std::path::Path;

use switchyard::protocol::wire::{deserialize_map, serialize_map};
use wasmi::{Caller, Engine, Extern, ExternType, Func, Instance, Linker, Memory, Module, Store, Val};

/// What the module sees of Envoy, and what it did to it.
#[derive(Debug, Default)]
pub struct HostState {
    pub request_headers: Vec<(String, String)>,
    pub response_headers: Vec<(String, String)>,
    /// By path joined with `/`.
    pub properties: HashMap<String, Vec<u8>>,
    pub request_body: Vec<u8>,
    pub response_body: Vec<u8>,
    pub plugin_config: Vec<u8>,
    pub shared: HashMap<String, (Vec<u8>, u32)>,
    /// Counters by name.
    pub counters: HashMap<String, i64>,
    metric_names: Vec<String>,
    pub now_ns: u64,
    /// The local reply: status, headers, body.
    pub reply: Option<(u32, Vec<(String, String)>, Vec<u8>)>,
    /// Every host call since the last `take_calls`, as `name args` (see each import).
    pub calls: Vec<String>,
    /// Every call of an import this host does not implement, never drained.
    pub unimplemented: Vec<String>,
    pub logs: Vec<String>,
}

fn header_set(map: &mut Vec<(String, String)>, name: &str, value: Option<&str>) {
    map.retain(|(k, _)| k != name);
    if let Some(v) = value {
        map.push((name.to_string(), v.to_string()));
    }
}

fn memory(caller: &Caller<'_, HostState>) -> Result<Memory, wasmi::Error> {
    match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Ok(m),
        _ => Err(wasmi::Error::new("module exports no memory")),
    }
}

fn read(caller: &Caller<'_, HostState>, ptr: i32, len: i32) -> Result<Vec<u8>, wasmi::Error> {
    let mem = memory(caller)?;
    let mut buf = vec![0u8; len as u32 as usize];
    mem.read(caller, ptr as u32 as usize, &mut buf).map_err(|e| wasmi::Error::new(e.to_string()))?;
    Ok(buf)
}

fn text(caller: &Caller<'_, HostState>, ptr: i32, len: i32) -> Result<String, wasmi::Error> {
    Ok(String::from_utf8_lossy(&read(caller, ptr, len)?).into_owned())
}

fn write_u32(caller: &mut Caller<'_, HostState>, at: i32, v: u32) -> Result<(), wasmi::Error> {
    let mem = memory(caller)?;
    mem.write(caller, at as u32 as usize, &v.to_le_bytes()).map_err(|e| wasmi::Error::new(e.to_string()))
}

/// Hands `data` to the module as proxy-wasm returns values: allocated by the module's own
/// `proxy_on_memory_allocate`, its address and size written at the two out-pointers.
fn give(caller: &mut Caller<'_, HostState>, data: &[u8], ptr_out: i32, size_out: i32) -> Result<(), wasmi::Error> {
    let Some(Extern::Func(alloc)) = caller.get_export("proxy_on_memory_allocate") else {
        return Err(wasmi::Error::new("module exports no proxy_on_memory_allocate"));
    };
    let mut out = [Val::I32(0)];
    alloc.call(&mut *caller, &[Val::I32(data.len() as i32)], &mut out)?;
    let Val::I32(at) = out[0] else { return Err(wasmi::Error::new("allocator returned no address")) };
    let mem = memory(caller)?;
    mem.write(&mut *caller, at as u32 as usize, data).map_err(|e| wasmi::Error::new(e.to_string()))?;
    write_u32(caller, ptr_out, at as u32)?;
    write_u32(caller, size_out, data.len() as u32)
}

fn map_name(t: i32) -> &'static str {
    match t {
        0 => "req",
        2 => "resp",
        _ => "other",
    }
}

const OK: i32 = 0;
const NOT_FOUND: i32 = 1;
const BAD_ARGUMENT: i32 = 2;
const CAS_MISMATCH: i32 = 8;

fn i(args: &[Val], k: usize) -> i32 {
    match args.get(k) {
        Some(Val::I32(v)) => *v,
        Some(Val::I64(v)) => *v as i32,
        _ => 0,
    }
}

fn i64_arg(args: &[Val], k: usize) -> i64 {
    match args.get(k) {
        Some(Val::I64(v)) => *v,
        Some(Val::I32(v)) => i64::from(*v),
        _ => 0,
    }
}

/// One import of the module: what the host does when the module calls it. Returns the status.
fn host_call(c: &mut Caller<'_, HostState>, name: &str, a: &[Val]) -> Result<i32, wasmi::Error> {
    match name {
        "proxy_log" => {
            let msg = text(c, i(a, 1), i(a, 2))?;
            c.data_mut().logs.push(msg);
            Ok(OK)
        }
        "proxy_get_current_time_nanoseconds" => {
            let now = c.data().now_ns;
            let mem = memory(c)?;
            mem.write(&mut *c, i(a, 0) as u32 as usize, &now.to_le_bytes())
                .map_err(|e| wasmi::Error::new(e.to_string()))?;
            c.data_mut().calls.push("now".into());
            Ok(OK)
        }
        "proxy_get_header_map_pairs" => {
            let t = i(a, 0);
            c.data_mut().calls.push(format!("{}_headers", map_name(t)));
            let pairs = match t {
                0 => c.data().request_headers.clone(),
                2 => c.data().response_headers.clone(),
                _ => Vec::new(),
            };
            let refs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            give(c, &serialize_map(&refs), i(a, 1), i(a, 2))?;
            Ok(OK)
        }
        "proxy_get_header_map_value" => {
            let t = i(a, 0);
            let key = text(c, i(a, 1), i(a, 2))?;
            c.data_mut().calls.push(format!("get_{}_header {key}", map_name(t)));
            let map = if t == 2 { &c.data().response_headers } else { &c.data().request_headers };
            match map.iter().find(|(k, _)| *k == key).map(|(_, v)| v.clone()) {
                Some(v) => {
                    give(c, v.as_bytes(), i(a, 3), i(a, 4))?;
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        }
        "proxy_replace_header_map_value" | "proxy_add_header_map_value" => {
            let t = i(a, 0);
            let (key, value) = (text(c, i(a, 1), i(a, 2))?, text(c, i(a, 3), i(a, 4))?);
            c.data_mut().calls.push(format!("set_{}_header {key}={value}", map_name(t)));
            let s = c.data_mut();
            header_set(if t == 2 { &mut s.response_headers } else { &mut s.request_headers }, &key, Some(&value));
            Ok(OK)
        }
        "proxy_remove_header_map_value" => {
            let t = i(a, 0);
            let key = text(c, i(a, 1), i(a, 2))?;
            c.data_mut().calls.push(format!("remove_{}_header {key}", map_name(t)));
            let s = c.data_mut();
            header_set(if t == 2 { &mut s.response_headers } else { &mut s.request_headers }, &key, None);
            Ok(OK)
        }
        "proxy_get_property" => {
            let path = read(c, i(a, 0), i(a, 1))?;
            let path = String::from_utf8_lossy(&path).trim_end_matches('\0').replace('\0', "/");
            c.data_mut().calls.push(format!("get_property {path}"));
            match c.data().properties.get(&path).cloned() {
                Some(v) => {
                    give(c, &v, i(a, 2), i(a, 3))?;
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        }
        "proxy_set_property" => {
            let path = read(c, i(a, 0), i(a, 1))?;
            let path = String::from_utf8_lossy(&path).trim_end_matches('\0').replace('\0', "/");
            let value = read(c, i(a, 2), i(a, 3))?;
            c.data_mut().calls.push(format!("set_property {path}"));
            c.data_mut().properties.insert(path, value);
            Ok(OK)
        }
        "proxy_get_buffer_bytes" => {
            let (t, start, max) = (i(a, 0), i(a, 1) as u32 as usize, i(a, 2) as u32 as usize);
            let buf = match t {
                0 => c.data().request_body.clone(),
                1 => c.data().response_body.clone(),
                7 => c.data().plugin_config.clone(),
                _ => return Ok(NOT_FOUND),
            };
            if t != 7 {
                c.data_mut().calls.push(format!("get_{}_body", if t == 0 { "req" } else { "resp" }));
            }
            let end = start.saturating_add(max).min(buf.len());
            let part = buf.get(start..end).unwrap_or(&[]).to_vec();
            give(c, &part, i(a, 3), i(a, 4))?;
            Ok(OK)
        }
        "proxy_set_buffer_bytes" => {
            let (t, start, size) = (i(a, 0), i(a, 1) as u32 as usize, i(a, 2) as u32 as usize);
            let value = read(c, i(a, 3), i(a, 4))?;
            c.data_mut().calls.push(format!("set_{}_body", if t == 0 { "req" } else { "resp" }));
            let s = c.data_mut();
            let buf = if t == 0 { &mut s.request_body } else { &mut s.response_body };
            // Envoy's rules: replace from 0, prepend at 0 with length 0, append at the end.
            if start == 0 && size == 0 {
                buf.splice(0..0, value);
            } else if start == 0 && size >= buf.len() {
                *buf = value;
            } else if start >= buf.len() {
                buf.extend_from_slice(&value);
            } else {
                return Ok(BAD_ARGUMENT);
            }
            Ok(OK)
        }
        "proxy_send_local_response" => {
            let status = i(a, 0) as u32;
            let body = read(c, i(a, 3), i(a, 4))?;
            let headers = deserialize_map(&read(c, i(a, 5), i(a, 6))?);
            c.data_mut().calls.push(format!("reply {status}"));
            c.data_mut().reply = Some((status, headers, body));
            Ok(OK)
        }
        "proxy_get_shared_data" => {
            let key = text(c, i(a, 0), i(a, 1))?;
            c.data_mut().calls.push(format!("get_shared {key}"));
            match c.data().shared.get(&key).cloned() {
                Some((v, cas)) => {
                    give(c, &v, i(a, 2), i(a, 3))?;
                    write_u32(c, i(a, 4), cas)?;
                    Ok(OK)
                }
                None => Ok(NOT_FOUND),
            }
        }
        "proxy_set_shared_data" => {
            let key = text(c, i(a, 0), i(a, 1))?;
            let value = read(c, i(a, 2), i(a, 3))?;
            let cas = i(a, 4) as u32;
            c.data_mut().calls.push(format!("set_shared {key}"));
            let s = c.data_mut();
            let current = s.shared.get(&key).map_or(0, |e| e.1);
            if cas != 0 && cas != current {
                return Ok(CAS_MISMATCH);
            }
            s.shared.insert(key, (value, current + 1));
            Ok(OK)
        }
        "proxy_define_metric" => {
            let name = text(c, i(a, 1), i(a, 2))?;
            let s = c.data_mut();
            let id = match s.metric_names.iter().position(|n| *n == name) {
                Some(id) => id,
                None => {
                    s.metric_names.push(name);
                    s.metric_names.len() - 1
                }
            };
            write_u32(c, i(a, 3), id as u32)?;
            Ok(OK)
        }
        "proxy_increment_metric" => {
            let (id, by) = (i(a, 0) as usize, i64_arg(a, 1));
            let s = c.data_mut();
            let name = s.metric_names.get(id).cloned().unwrap_or_default();
            s.calls.push(format!("count {name}"));
            *s.counters.entry(name).or_default() += by;
            Ok(OK)
        }
        "proxy_record_metric" => {
            let id = i(a, 0) as usize;
            let s = c.data_mut();
            let name = s.metric_names.get(id).cloned().unwrap_or_default();
            s.calls.push(format!("record {name}"));
            Ok(OK)
        }
        "random_get" => {
            let bytes: Vec<u8> = (0..i(a, 1)).map(|k| (k as u8).wrapping_mul(37).wrapping_add(11)).collect();
            let mem = memory(c)?;
            mem.write(&mut *c, i(a, 0) as u32 as usize, &bytes).map_err(|e| wasmi::Error::new(e.to_string()))?;
            Ok(OK)
        }
        "environ_sizes_get" => {
            write_u32(c, i(a, 0), 0)?;
            write_u32(c, i(a, 1), 0)?;
            Ok(OK)
        }
        "proxy_set_tick_period_milliseconds" => {
            c.data_mut().calls.push(format!("set_tick_period {}", i(a, 0)));
            Ok(OK)
        }
        "environ_get" | "proxy_set_effective_context" => Ok(OK),
        "proc_exit" => Err(wasmi::Error::new("proc_exit")),
        other => {
            c.data_mut().unimplemented.push(format!("unimplemented {other}"));
            Err(wasmi::Error::new(format!("unimplemented host call {other}")))
        }
    }
}

/// Both roles of the module, configured, in one store.
pub struct Vm {
    pub store: Store<HostState>,
    downstream: Instance,
    upstream: Instance,
    next_context: i32,
}

/// A filter role's instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Downstream,
    Upstream,
}

const ROOT_CONTEXT: i32 = 1;

impl Vm {
    /// Loads the module at `wasm`, starts one instance per role and configures both with
    /// `config` (the plugin configuration JSON). Errors if either refuses it.
    pub fn load(wasm: &Path, config: &str) -> Result<Vm, String> {
        let bytes = std::fs::read(wasm).map_err(|e| format!("{}: {e}", wasm.display()))?;
        let engine = Engine::default();
        let module = Module::new(&engine, &bytes[..]).map_err(|e| e.to_string())?;
        let mut store =
            Store::new(&engine, HostState { plugin_config: config.as_bytes().to_vec(), ..HostState::default() });
        let mut linker = Linker::<HostState>::new(&engine);
        for import in module.imports() {
            let ExternType::Func(ty) = import.ty() else {
                return Err(format!("non-function import {}", import.name()));
            };
            let name = import.name().to_string();
            let returns = ty.results().len();
            let func = Func::new(&mut store, ty.clone(), move |mut caller, args, results| {
                let status = host_call(&mut caller, &name, args)?;
                if returns > 0 {
                    results[0] = Val::I32(status);
                }
                Ok(())
            });
            linker.define(import.module(), import.name(), func).map_err(|e| e.to_string())?;
        }
        let instance = |root_id: &str, store: &mut Store<HostState>| -> Result<Instance, String> {
            let inst = linker.instantiate_and_start(&mut *store, &module).map_err(|e| e.to_string())?;
            store.data_mut().properties.insert("plugin_root_id".into(), root_id.as_bytes().to_vec());
            call(store, &inst, "_initialize", &[])?;
            call(store, &inst, "proxy_on_context_create", &[ROOT_CONTEXT, 0])?;
            call(store, &inst, "proxy_on_vm_start", &[ROOT_CONTEXT, 0])?;
            let ok = call(store, &inst, "proxy_on_configure", &[ROOT_CONTEXT, config.len() as i32])?;
            if ok != 1 {
                return Err(format!("{root_id} refused its configuration: {:?}", store.data().logs));
            }
            Ok(inst)
        };
        let downstream = instance("switchyard", &mut store)?;
        let upstream = instance(switchyard::wiring::ATTEMPT_ROOT_ID, &mut store)?;
        store.data_mut().calls.clear();
        Ok(Vm { store, downstream, upstream, next_context: ROOT_CONTEXT + 1 })
    }

    pub fn state(&mut self) -> &mut HostState {
        self.store.data_mut()
    }

    /// A new HTTP context (one filter instance for one stream, or one attempt) of `role`.
    pub fn context(&mut self, role: Role) -> Result<Context, String> {
        let id = self.next_context;
        self.next_context += 1;
        let inst = self.instance(role);
        call(&mut self.store, &inst, "proxy_on_context_create", &[id, ROOT_CONTEXT])?;
        Ok(Context { id, role })
    }

    fn instance(&self, role: Role) -> Instance {
        match role {
            Role::Downstream => self.downstream,
            Role::Upstream => self.upstream,
        }
    }

    /// Runs one callback (`proxy_on_request_headers` and the like) with the context id prepended;
    /// returns its result (the action for stream callbacks: 0 continue, 1 stop).
    pub fn on(&mut self, ctx: Context, callback: &str, args: &[i32]) -> Result<i32, String> {
        let inst = self.instance(ctx.role);
        let mut all = vec![ctx.id];
        all.extend_from_slice(args);
        call(&mut self.store, &inst, callback, &all)
    }

    /// The host calls made since the last take.
    pub fn take_calls(&mut self) -> Vec<String> {
        std::mem::take(&mut self.store.data_mut().calls)
    }

    /// Every call of an import this host does not implement, since the VM started (each also
    /// trapped the callback that made it).
    pub fn unimplemented(&self) -> Vec<String> {
        self.store.data().unimplemented.clone()
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Context {
    pub id: i32,
    pub role: Role,
}

fn call(store: &mut Store<HostState>, inst: &Instance, name: &str, args: &[i32]) -> Result<i32, String> {
    let Some(func) = inst.get_func(&*store, name) else { return Err(format!("module exports no {name}")) };
    let ty = func.ty(&*store);
    let params: Vec<Val> = ty
        .params()
        .iter()
        .zip(args.iter().chain(std::iter::repeat(&0)))
        .map(|(t, v)| if *t == wasmi::ValType::I64 { Val::I64(i64::from(*v)) } else { Val::I32(*v) })
        .collect();
    let mut results = vec![Val::I32(0); ty.results().len()];
    func.call(&mut *store, &params, &mut results).map_err(|e| format!("{name} trapped: {e}"))?;
    Ok(match results.first() {
        Some(Val::I32(v)) => *v,
        _ => 0,
    })
}
