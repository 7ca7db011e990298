//! What the benches share: inputs drawn from a deterministic generator, so runs compare.

/// A small deterministic generator (64-bit LCG).
pub struct Lcg(pub u64);

impl Lcg {
    /// The next 53 bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 11
    }

    /// A fraction in [0, 1).
    #[allow(dead_code, reason = "one bench draws fractions, the other does not")]
    pub fn fraction(&mut self) -> f64 {
        (self.next() % 1_000_000) as f64 / 1e6
    }
}
