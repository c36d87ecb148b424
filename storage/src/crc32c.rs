//! CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum
//! etcd's `snapshot status` reports and every stored version carries, by
//! the `crc32c` crate (the CPU's instruction where it has one; a read
//! checks each record it returns).

/// A running CRC-32C.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Crc32c(u32);

impl Crc32c {
    /// A CRC that continues from the checksum `sum` (as Go's
    /// `crc32.Update(sum, …)` does): etcd chains its WAL's checksums.
    pub(crate) fn resume(sum: u32) -> Self {
        Self(sum)
    }

    /// Adds `bytes`.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.0 = crc32c::crc32c_append(self.0, bytes);
    }

    /// The checksum of everything added.
    pub(crate) fn sum(&self) -> u32 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_check_value() {
        let mut crc = Crc32c::default();
        crc.update(b"1234");
        crc.update(b"56789");
        assert_eq!(crc.sum(), 0xe306_9283);
    }
}
