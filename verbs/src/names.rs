//! Enums whose printed form is their name: [`display_by_name!`](crate::display_by_name) writes
//! `Display` from a type's `name()`, and [`name_table!`](crate::name_table) declares such an
//! enum from one table of names — its `ALL`, `name()`, `Display` and `FromStr` — so what is
//! printed and what is parsed back cannot drift apart. (A name that travels as a byte is a
//! `verbs_lab::wire_codes!` table instead.)

/// Implements `Display` as the type's `name()`, for the enums whose printed form is their
/// name (port states, launchers, element types, reductions, protocol phases, ...): the one
/// `fmt` they share. `name` may take `self` or `&self`, and return a `&str` or a `String`.
#[macro_export]
macro_rules! display_by_name {
    ($($t:ty),+ $(,)?) => {$(
        impl ::std::fmt::Display for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(::std::convert::AsRef::<str>::as_ref(&self.name()))
            }
        }
    )+};
}

/// Declares an enum chosen by name on a command line, from one table of
/// `Variant => "name" | "alias" ...` rows, and a parse error's opening words. It gets:
///
/// - `ALL`: every value, in table order (an array);
/// - `name(self) -> &'static str`: the first name of its row, and `Display` as that name;
/// - `FromStr` (`Err = String`): any name of a row, exactly as written; anything else is
///   refused with the opening words, given the text, followed by `": use "` and the names
///   ([`one_of`]). With `ignore_case: true;` after the opening words, a name is taken in any
///   ASCII case (`rc` for `RC`, as perftest takes its upper-case names).
///
/// The attributes before `enum` (its doc, its derives) are the enum's.
///
/// ```
/// vl_verbs::name_table! {
///     /// How loud.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq)]
///     pub enum Volume {
///         Quiet => "quiet" | "q",
///         Loud => "loud",
///     }
///     unknown: "unknown volume '{}'";
/// }
/// assert_eq!(Volume::ALL, [Volume::Quiet, Volume::Loud]);
/// assert_eq!(Volume::Loud.to_string(), "loud");
/// assert_eq!("q".parse::<Volume>(), Ok(Volume::Quiet));
/// assert_eq!(
///     "shout".parse::<Volume>(),
///     Err("unknown volume 'shout': use quiet or loud".to_string())
/// );
/// assert!("Q".parse::<Volume>().is_err());
///
/// vl_verbs::name_table! {
///     /// A transport, in any case.
///     #[derive(Debug, Clone, Copy, PartialEq)]
///     pub enum Transport {
///         Rc => "RC",
///     }
///     unknown: "'{}' is not a transport";
///     ignore_case: true;
/// }
/// assert_eq!("rc".parse::<Transport>(), Ok(Transport::Rc));
/// ```
#[macro_export]
macro_rules! name_table {
    (
        $(#[$meta:meta])*
        $vis:vis enum $t:ident {
            $($(#[$vmeta:meta])* $variant:ident => $name:literal $(| $alias:literal)*),+ $(,)?
        }
        unknown: $unknown:literal;
        $(ignore_case: $ignore_case:literal;)?
    ) => {
        $(#[$meta])*
        $vis enum $t {
            $($(#[$vmeta])* $variant),+
        }

        impl $t {
            /// Every value, in table order.
            pub const ALL: [$t; [$(stringify!($variant)),+].len()] = [$($t::$variant),+];

            /// Its name: what it prints as, and the first spelling it is parsed from.
            pub fn name(self) -> &'static str {
                match self {
                    $($t::$variant => $name),+
                }
            }
        }

        $crate::display_by_name!($t);

        impl ::std::str::FromStr for $t {
            type Err = ::std::string::String;
            /// By any name of its row (exactly as written, or in any case if the table says
            /// so); the error lists the names.
            fn from_str(s: &str) -> ::std::result::Result<$t, ::std::string::String> {
                let ignore_case = false $(|| $ignore_case)?;
                let is = |name: &str| {
                    if ignore_case { name.eq_ignore_ascii_case(s) } else { name == s }
                };
                $(if is($name) $(|| is($alias))* {
                    return ::std::result::Result::Ok($t::$variant);
                })+
                ::std::result::Result::Err(format!(
                    concat!($unknown, ": use {}"),
                    s,
                    $crate::names::one_of(&[$($name),+])
                ))
            }
        }
    };
}

/// The names a parse error offers: `"a, b, c or d"` (`"a"` alone; nothing for none).
pub fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::one_of;

    #[test]
    fn one_of_joins_with_commas_and_a_final_or() {
        assert_eq!(one_of(&[]), "");
        assert_eq!(one_of(&["sum"]), "sum");
        assert_eq!(one_of(&["sum", "max"]), "sum or max");
        assert_eq!(
            one_of(&["sum", "prod", "min", "max"]),
            "sum, prod, min or max"
        );
    }
}
