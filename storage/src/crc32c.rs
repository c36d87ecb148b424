//! CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum
//! etcd's `snapshot status` reports, computed here from a table, one byte
//! at a time (status reads a snapshot once; a table is fast enough and
//! needs no crate).

/// A running CRC-32C.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Crc32c(u32);

impl Default for Crc32c {
    fn default() -> Self {
        Self(!0)
    }
}

impl Crc32c {
    /// A CRC that continues from the checksum `sum` (as Go's
    /// `crc32.Update(sum, …)` does): etcd chains its WAL's checksums.
    pub(crate) fn resume(sum: u32) -> Self {
        Self(!sum)
    }

    /// Adds `bytes`.
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        let mut crc = self.0;
        for &b in bytes {
            crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
        }
        self.0 = crc;
    }

    /// The checksum of everything added.
    pub(crate) fn sum(&self) -> u32 {
        !self.0
    }
}

const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

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
