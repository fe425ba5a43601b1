//! libFuzzer target for the aclfile parser and the ACL SETUSER rules
//! (`gradus_server::tenancy::acl_users::parse_file`). Checks: no panic; every user a file yields,
//! written back as its `ACL LIST` line, parses to the same user (what `ACL SAVE` writes,
//! `ACL LOAD` reads back unchanged).
//! Run with `cargo +nightly fuzz run acl_file`.
#![no_main]

use gradus_server::tenancy::acl_users::parse_file;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(users) = parse_file(text, "fuzz.acl", 0, &|_| None, &|_| false) else {
        return;
    };
    let written: String = users.iter().map(|u| u.describe(None) + "\n").collect();
    let again = parse_file(&written, "fuzz.acl", 0, &|_| None, &|_| false)
        .expect("a saved aclfile loads");
    assert_eq!(users, again, "{written}");
});
