//! `rowbranch doctor`: whether DATABASE_URL checks the certificate of a server on another
//! machine. Without it, whoever sits on the path can pose as the database, and the rows and
//! queue messages rowbranch reads from it become work: a warning, with where Supabase's CA
//! certificate comes from.

use super::Check;
use crate::config::Config;
use crate::db;

/// Where Supabase documents its CA certificate and `verify-full`.
const SUPABASE_SSL: &str = "https://supabase.com/docs/guides/platform/ssl-enforcement";

pub fn checks(config: &Config, out: &mut Vec<Check>) {
    let Some(url) = &config.database_url else {
        return;
    };
    let Some(found) = db::unchecked(url.expose()) else {
        return;
    };
    out.push(Check::advise(
        format!(
            "DATABASE_URL reaches {} with sslmode={}: {}; whoever can then pose as the database can read what rowbranch reads and give it rows and queue messages of their own, which become work",
            found.host, found.sslmode, found.exposure
        ),
        format!(
            "check the server's certificate: add sslmode=verify-full and sslrootcert=/path/to/ca.crt to DATABASE_URL (`?sslmode=verify-full&sslrootcert=…` in a URL, `sslmode=verify-full sslrootcert=…` among key=value pairs); rowbranch reads the CA as a PEM or DER file. Supabase's CA certificate: Dashboard → Database Settings → SSL Configuration → Download certificate ({SUPABASE_SSL}); a server whose certificate comes from a public CA takes sslrootcert=system"
        ),
    ));
}
