//! [`wire_codes!`](crate::wire_codes): the one way to declare a table of one-byte wire codes.

/// Declares an enum whose values travel as one byte — a message type, a phase, a kind — from a
/// single table of `Variant = code => "name"` rows, so the code, its decoding and its name
/// cannot drift apart. The enum is `#[repr(u8)]` (each variant's discriminant is its code) and
/// gets:
///
/// - `ALL`: every value, in table order (an array);
/// - `code(self) -> u8`: the byte on the wire;
/// - `from_code(u8) -> Option<Self>`: the value of a byte, `None` for a byte the table lacks
///   (and `TryFrom<u8>`, whose error is that byte);
/// - `name(self) -> &'static str`: the name errors and logs print (with
///   [`display_by_name!`](crate::display_by_name) it is also the `Display` form).
///
/// ```
/// verbs_lab::wire_codes! {
///     /// What a record holds.
///     pub enum Kind {
///         /// The opening record.
///         Hello = 1 => "HELLO",
///         Bye = 2 => "BYE",
///     }
/// }
/// assert_eq!(Kind::Bye.code(), 2);
/// assert_eq!(Kind::from_code(1), Some(Kind::Hello));
/// assert_eq!(Kind::try_from(3), Err(3));
/// assert_eq!(Kind::Hello.name(), "HELLO");
/// assert_eq!(Kind::ALL, [Kind::Hello, Kind::Bye]);
/// ```
#[macro_export]
macro_rules! wire_codes {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $($(#[$vmeta:meta])* $variant:ident = $code:literal => $text:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        $vis enum $name {
            $($(#[$vmeta])* $variant = $code),+
        }

        // A table need not use every accessor (a private message type is never listed).
        #[allow(dead_code)]
        impl $name {
            /// Every value, in table order.
            pub const ALL: [$name; [$(stringify!($variant)),+].len()] = [$($name::$variant),+];

            /// The byte on the wire.
            pub const fn code(self) -> u8 {
                self as u8
            }

            /// The value of the byte `code`; `None` for a byte the table lacks.
            pub const fn from_code(code: u8) -> ::core::option::Option<$name> {
                match code {
                    $($code => ::core::option::Option::Some($name::$variant),)+
                    _ => ::core::option::Option::None,
                }
            }

            /// The name errors and logs print.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl ::core::convert::TryFrom<u8> for $name {
            /// The byte the table lacks.
            type Error = u8;
            fn try_from(code: u8) -> ::core::result::Result<$name, u8> {
                $name::from_code(code).ok_or(code)
            }
        }
    };
}
