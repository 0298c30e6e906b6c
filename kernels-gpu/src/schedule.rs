//! The schedule fuzzer (feature `schedule-fuzz`; in any other build every
//! function here is empty): random delays where a block's progress meets
//! its peers', so that one test run sees the schedules a loaded machine
//! makes now and then: a block that starts tens or hundreds of
//! microseconds after the others, a barrier one rank reaches late, a wait
//! that starts after the data it waits for arrived. Every collective must
//! stay correct under any of them (NOTE [co-residency] in
//! `host/src/intra/residency.rs` says what progress needs).
//!
//! The randomness mixes `%globaltimer`, the block, the SM and the site:
//! different on every rank, call and run, not reproducible (a seed would
//! need a parameter every kernel passes). The host's suite states the
//! calls made and checks every result.

/// A block's start (after the launch prologue).
pub const SITE_START: u32 = 1;
/// Before a block tells its peers it reached a barrier.
pub const SITE_ARRIVE: u32 = 2;
/// Before a thread starts waiting on a peer's flag, counter or data.
pub const SITE_WAIT: u32 = 3;

/// Delays the calling thread at `site`: usually 0 to 8 us, one time in 256
/// for 50 to 300 us (a block that starts late or is descheduled). Every
/// thread of a block computes the same delay (it does not depend on the
/// thread), so a block-wide site delays the block as a whole.
#[inline(always)]
pub fn delay(site: u32) {
    #[cfg(feature = "schedule-fuzz")]
    {
        use crate::ptx;
        let t = ptx::globaltimer_ns();
        // splitmix64's finalizer over the clock (to the microsecond, so
        // the block's threads agree), the block, the SM and the site.
        let mut x = (t >> 10)
            ^ ((ptx::block_idx_x() as u64) << 32)
            ^ ((ptx::sm_id() as u64) << 48)
            ^ ((site as u64) << 56);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        let ns = if x & 255 == 0 {
            50_000 + ((x >> 8) % 250_000) as u32
        } else {
            ((x >> 8) % 8_192) as u32
        };
        // `nanosleep` takes at most 1 ms a time.
        ptx::nanosleep(ns);
    }
    #[cfg(not(feature = "schedule-fuzz"))]
    let _ = site;
}
