//! The region API for C and C++ (`include/topdown_region.h`), built into a shared library by
//! the `topdown_region` example (`cargo build -p topdown-user --example topdown_region`).
//! Errors are kept per thread for `topdown_last_error`; nothing unwinds across the boundary.

use std::{
    cell::RefCell,
    ffi::{CString, c_char, c_int, c_uint},
    panic::{AssertUnwindSafe, catch_unwind},
};

use anyhow::{Result, anyhow};

use super::{
    Region,
    decode::{self, Fractions, MetricsReading},
};

/// `topdown_fractions` of the header.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CFractions {
    retiring: f64,
    bad_speculation: f64,
    frontend_bound: f64,
    backend_bound: f64,
    heavy_operations: f64,
    light_operations: f64,
    branch_mispredicts: f64,
    machine_clears: f64,
    fetch_latency: f64,
    fetch_bandwidth: f64,
    memory_bound: f64,
    core_bound: f64,
    level: c_int,
    slots: u64,
    uncertainty: f64,
}

impl CFractions {
    fn from(fractions: &Fractions) -> Self {
        let get = |metric: &str| fractions.get(metric).unwrap_or(f64::NAN);
        Self {
            retiring: get("tma_retiring"),
            bad_speculation: get("tma_bad_speculation"),
            frontend_bound: get("tma_frontend_bound"),
            backend_bound: get("tma_backend_bound"),
            heavy_operations: get("tma_heavy_operations"),
            light_operations: get("tma_light_operations"),
            branch_mispredicts: get("tma_branch_mispredicts"),
            machine_clears: get("tma_machine_clears"),
            fetch_latency: get("tma_fetch_latency"),
            fetch_bandwidth: get("tma_fetch_bandwidth"),
            memory_bound: get("tma_memory_bound"),
            core_bound: get("tma_core_bound"),
            level: if fractions.values.len() > 4 { 2 } else { 1 },
            slots: fractions.slots,
            uncertainty: fractions.uncertainty,
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Runs `body`, keeping its error (or panic) for `topdown_last_error`: 0 or -1.
fn status(body: impl FnOnce() -> Result<()>) -> c_int {
    let outcome = catch_unwind(AssertUnwindSafe(body))
        .unwrap_or_else(|_| Err(anyhow!("internal error (a panic was caught)")));
    let message = match &outcome {
        Ok(()) => String::new(),
        Err(error) => format!("{error:#}"),
    };
    LAST_ERROR.with(|last| {
        *last.borrow_mut() = CString::new(message.replace('\0', " ")).unwrap_or_default();
    });
    if outcome.is_ok() { 0 } else { -1 }
}

/// Writes `fractions` to `out`.
fn write(out: *mut CFractions, fractions: &Fractions) -> Result<()> {
    if out.is_null() {
        return Err(anyhow!("the topdown_fractions pointer is NULL"));
    }
    // SAFETY: the caller passes a writable topdown_fractions (checked non-null).
    unsafe { out.write(CFractions::from(fractions)) };
    Ok(())
}

/// `topdown_region_open`.
#[unsafe(no_mangle)]
pub extern "C" fn topdown_region_open() -> *mut Region {
    let mut opened = None;
    status(|| {
        opened = Some(Region::open()?);
        Ok(())
    });
    opened.map_or(std::ptr::null_mut(), |region| {
        Box::into_raw(Box::new(region))
    })
}

/// The region behind `region`, or an error for NULL.
///
/// # Safety
/// `region` is NULL or from `topdown_region_open`, not closed.
unsafe fn region_mut<'a>(region: *mut Region) -> Result<&'a mut Region> {
    // SAFETY: as the caller promises.
    unsafe { region.as_mut() }.ok_or_else(|| anyhow!("the topdown_region pointer is NULL"))
}

/// `topdown_region_start`.
///
/// # Safety
/// `region` is NULL or from `topdown_region_open`, not closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn topdown_region_start(region: *mut Region) -> c_int {
    // SAFETY: as the caller promises.
    status(|| unsafe { region_mut(region) }?.start())
}

/// `topdown_region_stop`.
///
/// # Safety
/// `region` as for start; `out` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn topdown_region_stop(region: *mut Region, out: *mut CFractions) -> c_int {
    status(|| {
        // SAFETY: as the caller promises.
        let fractions = unsafe { region_mut(region) }?.stop()?;
        write(out, &fractions)
    })
}

/// `topdown_region_reset`.
///
/// # Safety
/// `region` is NULL or from `topdown_region_open`, not closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn topdown_region_reset(region: *mut Region) -> c_int {
    // SAFETY: as the caller promises.
    status(|| unsafe { region_mut(region) }?.reset())
}

/// `topdown_region_close`.
///
/// # Safety
/// `region` is NULL or from `topdown_region_open`, closed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn topdown_region_close(region: *mut Region) {
    if !region.is_null() {
        // SAFETY: made by Box::into_raw in open, freed once.
        drop(unsafe { Box::from_raw(region) });
    }
}

/// `topdown_decode_reading`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn topdown_decode_reading(
    slots: u64,
    metrics: u64,
    level: c_int,
    out: *mut CFractions,
) -> c_int {
    status(|| {
        let fractions = decode::since_reset(MetricsReading { slots, metrics }, level_of(level)?)?;
        write(out, &fractions)
    })
}

/// `topdown_decode_region`.
///
/// # Safety
/// `out` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn topdown_decode_region(
    slots_a: u64,
    metrics_a: u64,
    slots_b: u64,
    metrics_b: u64,
    pmc_width: c_uint,
    level: c_int,
    out: *mut CFractions,
) -> c_int {
    status(|| {
        let a = MetricsReading {
            slots: slots_a,
            metrics: metrics_a,
        };
        let b = MetricsReading {
            slots: slots_b,
            metrics: metrics_b,
        };
        let fractions = decode::region(a, b, pmc_width, level_of(level)?)?;
        write(out, &fractions)
    })
}

/// `topdown_last_error`: valid until this thread's next call.
#[unsafe(no_mangle)]
pub extern "C" fn topdown_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().as_ptr())
}

fn level_of(level: c_int) -> Result<u8> {
    match level {
        1 => Ok(1),
        2 => Ok(2),
        other => Err(anyhow!("level {other}: 1 or 2")),
    }
}
