//! `json!` for the translators: serde_json's macro (its grammar copied), except that an
//! interpolated value becomes a `Value` through [`IntoV`] (a clone, no `Serialize` and no
//! `unwrap`) and members go in through one out-of-line [`put`]: serde_json's expansion inlines a
//! map insert and a serializer call at every member, which made the translators the largest code
//! in the Wasm module.
#![allow(clippy::all)]

use serde_json::{Map, Value};

/// Inserts one member (out of line: one copy of the map insert for every `json!` member).
#[inline(never)]
pub fn put(o: &mut Map<String, Value>, k: &str, v: Value) {
    o.insert(k.to_string(), v);
}

/// A member by name, out of line: `Value::get` and `Map::get` inline a map search at every
/// call site.
pub trait G {
    fn g(&self, k: &str) -> Option<&Value>;
}

impl G for Value {
    #[inline(never)]
    fn g(&self, k: &str) -> Option<&Value> {
        self.get(k)
    }
}

impl G for Map<String, Value> {
    #[inline(never)]
    fn g(&self, k: &str) -> Option<&Value> {
        self.get(k)
    }
}

/// What a `json!` value may interpolate.
pub trait IntoV {
    fn into_v(&self) -> Value;
}

impl IntoV for Value {
    fn into_v(&self) -> Value {
        self.clone()
    }
}
impl IntoV for str {
    fn into_v(&self) -> Value {
        Value::String(self.to_string())
    }
}
impl IntoV for String {
    fn into_v(&self) -> Value {
        Value::String(self.clone())
    }
}
impl IntoV for bool {
    fn into_v(&self) -> Value {
        Value::Bool(*self)
    }
}
impl IntoV for u64 {
    fn into_v(&self) -> Value {
        Value::from(*self)
    }
}
impl IntoV for usize {
    fn into_v(&self) -> Value {
        Value::from(*self as u64)
    }
}
impl IntoV for u16 {
    fn into_v(&self) -> Value {
        Value::from(u64::from(*self))
    }
}
impl IntoV for Vec<Value> {
    fn into_v(&self) -> Value {
        Value::Array(self.clone())
    }
}
impl IntoV for i32 {
    fn into_v(&self) -> Value {
        Value::from(*self)
    }
}
impl<T: IntoV> IntoV for Option<T> {
    fn into_v(&self) -> Value {
        self.as_ref().map_or(Value::Null, IntoV::into_v)
    }
}
impl<T: IntoV + ?Sized> IntoV for &T {
    fn into_v(&self) -> Value {
        (**self).into_v()
    }
}

macro_rules! json {
    ($($json:tt)+) => {
        jv_internal!($($json)+)
    };
}

macro_rules! jv_internal {
    //////////////////////////////////////////////////////////////////////////
    // TT muncher for parsing the inside of an array [...]. Produces a vec![...]
    // of the elements.
    //
    // Must be invoked as: json_internal!(@array [] $($tt)*)
    //////////////////////////////////////////////////////////////////////////

    // Done with trailing comma.
    (@array [$($elems:expr,)*]) => {
        ::std::vec![$($elems,)*]
    };

    // Done without trailing comma.
    (@array [$($elems:expr),*]) => {
        ::std::vec![$($elems),*]
    };

    // Next element is `null`.
    (@array [$($elems:expr,)*] null $($rest:tt)*) => {
        jv_internal!(@array [$($elems,)* jv_internal!(null)] $($rest)*)
    };

    // Next element is `true`.
    (@array [$($elems:expr,)*] true $($rest:tt)*) => {
        jv_internal!(@array [$($elems,)* jv_internal!(true)] $($rest)*)
    };

    // Next element is `false`.
    (@array [$($elems:expr,)*] false $($rest:tt)*) => {
        jv_internal!(@array [$($elems,)* jv_internal!(false)] $($rest)*)
    };

    // Next element is an array.
    (@array [$($elems:expr,)*] [$($array:tt)*] $($rest:tt)*) => {
        jv_internal!(@array [$($elems,)* jv_internal!([$($array)*])] $($rest)*)
    };

    // Next element is a map.
    (@array [$($elems:expr,)*] {$($map:tt)*} $($rest:tt)*) => {
        jv_internal!(@array [$($elems,)* jv_internal!({$($map)*})] $($rest)*)
    };

    // Next element is an expression followed by comma.
    (@array [$($elems:expr,)*] $next:expr, $($rest:tt)*) => {
        jv_internal!(@array [$($elems,)* jv_internal!($next),] $($rest)*)
    };

    // Last element is an expression with no trailing comma.
    (@array [$($elems:expr,)*] $last:expr) => {
        jv_internal!(@array [$($elems,)* jv_internal!($last)])
    };

    // Comma after the most recent element.
    (@array [$($elems:expr),*] , $($rest:tt)*) => {
        jv_internal!(@array [$($elems,)*] $($rest)*)
    };

    // Unexpected token after most recent element.
    (@array [$($elems:expr),*] $unexpected:tt $($rest:tt)*) => {
        jv_unexpected!($unexpected)
    };

    //////////////////////////////////////////////////////////////////////////
    // TT muncher for parsing the inside of an object {...}. Each entry is
    // inserted into the given map variable.
    //
    // Must be invoked as: json_internal!(@object $map () ($($tt)*) ($($tt)*))
    //
    // We require two copies of the input tokens so that we can match on one
    // copy and trigger errors on the other copy.
    //////////////////////////////////////////////////////////////////////////

    // Done.
    (@object $object:ident () () ()) => {};

    // Insert the current entry followed by trailing comma.
    (@object $object:ident [$($key:tt)+] ($value:expr) , $($rest:tt)*) => {
        $crate::translate::jsonm::put(&mut $object, ($($key)+), $value);
        jv_internal!(@object $object () ($($rest)*) ($($rest)*));
    };

    // Current entry followed by unexpected token.
    (@object $object:ident [$($key:tt)+] ($value:expr) $unexpected:tt $($rest:tt)*) => {
        jv_unexpected!($unexpected);
    };

    // Insert the last entry without trailing comma.
    (@object $object:ident [$($key:tt)+] ($value:expr)) => {
        $crate::translate::jsonm::put(&mut $object, ($($key)+), $value);
    };

    // Next value is `null`.
    (@object $object:ident ($($key:tt)+) (: null $($rest:tt)*) $copy:tt) => {
        jv_internal!(@object $object [$($key)+] (jv_internal!(null)) $($rest)*);
    };

    // Next value is `true`.
    (@object $object:ident ($($key:tt)+) (: true $($rest:tt)*) $copy:tt) => {
        jv_internal!(@object $object [$($key)+] (jv_internal!(true)) $($rest)*);
    };

    // Next value is `false`.
    (@object $object:ident ($($key:tt)+) (: false $($rest:tt)*) $copy:tt) => {
        jv_internal!(@object $object [$($key)+] (jv_internal!(false)) $($rest)*);
    };

    // Next value is an array.
    (@object $object:ident ($($key:tt)+) (: [$($array:tt)*] $($rest:tt)*) $copy:tt) => {
        jv_internal!(@object $object [$($key)+] (jv_internal!([$($array)*])) $($rest)*);
    };

    // Next value is a map.
    (@object $object:ident ($($key:tt)+) (: {$($map:tt)*} $($rest:tt)*) $copy:tt) => {
        jv_internal!(@object $object [$($key)+] (jv_internal!({$($map)*})) $($rest)*);
    };

    // Next value is an expression followed by comma.
    (@object $object:ident ($($key:tt)+) (: $value:expr , $($rest:tt)*) $copy:tt) => {
        jv_internal!(@object $object [$($key)+] (jv_internal!($value)) , $($rest)*);
    };

    // Last value is an expression with no trailing comma.
    (@object $object:ident ($($key:tt)+) (: $value:expr) $copy:tt) => {
        jv_internal!(@object $object [$($key)+] (jv_internal!($value)));
    };

    // Missing value for last entry. Trigger a reasonable error message.
    (@object $object:ident ($($key:tt)+) (:) $copy:tt) => {
        // "unexpected end of macro invocation"
        jv_internal!();
    };

    // Missing colon and value for last entry. Trigger a reasonable error
    // message.
    (@object $object:ident ($($key:tt)+) () $copy:tt) => {
        // "unexpected end of macro invocation"
        jv_internal!();
    };

    // Misplaced colon. Trigger a reasonable error message.
    (@object $object:ident () (: $($rest:tt)*) ($colon:tt $($copy:tt)*)) => {
        // Takes no arguments so "no rules expected the token `:`".
        jv_unexpected!($colon);
    };

    // Found a comma inside a key. Trigger a reasonable error message.
    (@object $object:ident ($($key:tt)*) (, $($rest:tt)*) ($comma:tt $($copy:tt)*)) => {
        // Takes no arguments so "no rules expected the token `,`".
        jv_unexpected!($comma);
    };

    // Key is fully parenthesized. This avoids clippy double_parens false
    // positives because the parenthesization may be necessary here.
    (@object $object:ident () (($key:expr) : $($rest:tt)*) $copy:tt) => {
        jv_internal!(@object $object ($key) (: $($rest)*) (: $($rest)*));
    };

    // Refuse to absorb colon token into key expression.
    (@object $object:ident ($($key:tt)*) (: $($unexpected:tt)+) $copy:tt) => {
        jv_expect_expr_comma!($($unexpected)+);
    };

    // Munch a token into the current key.
    (@object $object:ident ($($key:tt)*) ($tt:tt $($rest:tt)*) $copy:tt) => {
        jv_internal!(@object $object ($($key)* $tt) ($($rest)*) ($($rest)*));
    };

    //////////////////////////////////////////////////////////////////////////
    // The main implementation.
    //
    // Must be invoked as: json_internal!($($json)+)
    //////////////////////////////////////////////////////////////////////////

    (null) => {
        ::serde_json::Value::Null
    };

    (true) => {
        ::serde_json::Value::Bool(true)
    };

    (false) => {
        ::serde_json::Value::Bool(false)
    };

    ([]) => {
        ::serde_json::Value::Array(::std::vec![])
    };

    ([ $($tt:tt)+ ]) => {
        ::serde_json::Value::Array(jv_internal!(@array [] $($tt)+))
    };

    ({}) => {
        ::serde_json::Value::Object(::serde_json::Map::new())
    };

    ({ $($tt:tt)+ }) => {
        ::serde_json::Value::Object({
            let mut object = ::serde_json::Map::new();
            jv_internal!(@object object () ($($tt)+) ($($tt)+));
            object
        })
    };

    // Any Serialize type: numbers, strings, struct literals, variables etc.
    // Must be below every other rule.
    ($other:expr) => {
        $crate::translate::jsonm::IntoV::into_v(&$other)
    };
}

#[allow(unused_macros)]
macro_rules! jv_unexpected {
    () => {};
}

#[allow(unused_macros)]
macro_rules! jv_expect_expr_comma {
    ($e:expr , $($tt:tt)*) => {};
}
