//! `--auto-tls`: a self-signed server certificate, made once and kept.
//!
//! As etcd does, the certificate and key live in `cert.pem` and `key.pem`
//! of a directory under the data dir and are reused on later starts, so
//! clients that pinned the certificate keep working; the names of the
//! listen URLs' hosts are its subject alternative names, and it is valid
//! for a year. The key is ECDSA P-256 (etcd uses P-521, which ring does
//! not sign with). Nobody vouches for such a certificate, so clients must
//! trust it explicitly or skip verification, exactly as with etcd.

use std::fs;
use std::io::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::TlsError;

/// How long a generated certificate is valid, in days (etcd: one year).
const VALIDITY_DAYS: i64 = 365;

/// The certificate and key files in `dir` (`cert.pem`, `key.pem`), made
/// for `hosts` (IP addresses or DNS names) if they do not exist yet.
pub fn self_signed(dir: &Path, hosts: &[String]) -> Result<(PathBuf, PathBuf), TlsError> {
    let cert_path = dir.join("cert.pem");
    let key_path = dir.join("key.pem");
    if cert_path.is_file() && key_path.is_file() {
        return Ok((cert_path, key_path));
    }
    let failed = |path: &Path, reason: String| TlsError::SelfSigned {
        path: path.to_path_buf(),
        reason,
    };
    let (cert_pem, key_pem) = generate(hosts).map_err(|e| failed(dir, e))?;
    create_private_dir(dir).map_err(|e| failed(dir, e.to_string()))?;
    write_file(&key_path, key_pem.as_bytes(), 0o600)
        .map_err(|e| failed(&key_path, e.to_string()))?;
    write_file(&cert_path, cert_pem.as_bytes(), 0o644)
        .map_err(|e| failed(&cert_path, e.to_string()))?;
    Ok((cert_path, key_path))
}

/// A fresh key and a self-signed certificate for `hosts`, both PEM.
fn generate(hosts: &[String]) -> Result<(String, String), String> {
    let mut params = CertificateParams::default();
    for host in hosts {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(
                host.to_owned()
                    .try_into()
                    .map_err(|e| format!("{host:?} is not a usable host name: {e}"))?,
            ),
        };
        if !params.subject_alt_names.contains(&name) {
            params.subject_alt_names.push(name);
        }
    }
    let mut subject = DistinguishedName::new();
    subject.push(DnType::OrganizationName, "oxetcd");
    params.distinguished_name = subject;
    params.is_ca = IsCa::NoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let today = days_since_epoch(SystemTime::now());
    // A day of slack for clocks that lag ours.
    let (year, month, day) = civil_date(today - 1);
    params.not_before = rcgen::date_time_ymd(year, month, day);
    let (year, month, day) = civil_date(today + VALIDITY_DAYS);
    params.not_after = rcgen::date_time_ymd(year, month, day);
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn days_since_epoch(now: SystemTime) -> i64 {
    match now.duration_since(UNIX_EPOCH) {
        Ok(since) => (since.as_secs() / 86_400) as i64,
        Err(_) => 0,
    }
}

/// Year, month and day of day `days` since 1970-01-01 (the proleptic
/// Gregorian civil-from-days conversion, valid for any day this code will
/// see).
fn civil_date(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year as i32, month as u8, day as u8)
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir)
}

/// Writes `bytes` to `path` with `mode` (on Unix), durably.
fn write_file(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        let ymd = civil_date;
        assert_eq!(ymd(0), (1970, 1, 1));
        assert_eq!(ymd(59), (1970, 3, 1));
        assert_eq!(ymd(11_016), (2000, 2, 29));
        assert_eq!(ymd(19_723), (2024, 1, 1));
        assert_eq!(ymd(20_088), (2024, 12, 31));
    }
}
