//! netem's per-packet decisions run on the emulator's data path at up to a million packets a
//! second: after its tables are made, nothing they do may allocate. An allocator that counts
//! this thread's allocations holds them to it (a test binary of its own, so that the count
//! is this file's alone).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use wirebench_lab::netem::{
    corrupt_payload, Delay, Distribution, Netem, NetemConfig, Slot, SlotConfig, SlotGap,
};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to the system allocator unchanged; the count is a
// thread-local cell, which a const initializer lets allocation-free code touch.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn per_packet_decisions_allocate_nothing() {
    // The count sees an allocation of this thread.
    let before = allocations();
    let held = std::hint::black_box(vec![1u8; 64]);
    assert_eq!(allocations(), before + 1);
    drop(held);
    let mut packet = vec![0u8; 1500];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&1500u16.to_be_bytes());
    packet[9] = 17;
    for distribution in [
        Distribution::Uniform,
        Distribution::Normal,
        Distribution::Pareto,
        Distribution::ParetoNormal,
    ] {
        let mut netem = Netem::new(
            NetemConfig {
                jitter_ns: 5_000_000,
                distribution,
                delay_correlation: 0.25,
                reorder: 0.25,
                reorder_correlation: 0.5,
                reorder_gap: 3,
                duplicate: 0.1,
                duplicate_correlation: 0.1,
                corrupt: 0.5,
                corrupt_correlation: 0.1,
            },
            42,
        );
        let mut slot = Slot::new(
            SlotConfig {
                gap: SlotGap::Table {
                    distribution,
                    delay_ns: 1_000_000,
                    jitter_ns: 100_000,
                },
                max_packets: 10,
                max_bytes: 0,
            },
            42,
        );
        let before = allocations();
        let (mut reordered, mut corrupted) = (0, 0);
        for i in 0..100_000 {
            slot.release(i * 10_000, 1500);
            netem.duplicate();
            if let Some(r) = netem.corrupt() {
                corrupted += usize::from(corrupt_payload(&mut packet, r).is_some());
            }
            if netem.delay(10_000_000) == Delay::Reordered {
                reordered += 1;
            }
        }
        assert_eq!(allocations(), before, "{distribution:?}");
        // The loop did its work.
        assert!(
            reordered > 1000 && corrupted > 1000,
            "{reordered} {corrupted}"
        );
    }
}
