//! `trestle-cc`: a drop-in `CC` that compiles C with carving instrumentation and links
//! the trestle runtime. Invoked through a name ending in `++` or containing `cxx` (a
//! `trestle-c++` symlink), it is the C++ wrapper. See [`trestle_instrument::driver`].

use trestle_instrument::driver::{main_with_args, Lang};

fn main() {
    let mut args = std::env::args_os();
    let lang = args
        .next()
        .map_or(Lang::C, |argv0| Lang::from_program_name(&argv0));
    std::process::exit(main_with_args(lang, args.collect()));
}
