//! `trestle-cxx` (install or symlink it as `trestle-c++`): a drop-in `CXX` that compiles
//! C++ with carving instrumentation and links the trestle runtime. Cargo cannot name a
//! binary `trestle-c++` (`+` is not allowed in crate names), hence this name; a
//! `trestle-c++` symlink to `trestle-cc` works as well. See [`trestle_instrument::driver`].

use trestle_instrument::driver::{main_with_args, Lang};

fn main() {
    std::process::exit(main_with_args(
        Lang::Cxx,
        std::env::args_os().skip(1).collect(),
    ));
}
