//! The `table` format: bordered tables with centred upper-case headings
//! and right-aligned cells, for the cluster commands only.

use super::{db_status_rows, hash_rows, member_rows, status_rows, View};

pub(super) fn render(view: &View<'_>) -> Option<String> {
    let (headings, rows): (&[&str], Vec<Vec<String>>) = match *view {
        View::MemberList(r) => (
            &[
                "ID",
                "Status",
                "Name",
                "Peer Addrs",
                "Client Addrs",
                "Is Learner",
            ],
            member_rows(r),
        ),
        View::EndpointHealth(list) => (
            &["endpoint", "health", "took", "error"],
            list.iter()
                .map(|h| {
                    vec![
                        h.endpoint.clone(),
                        h.health.to_string(),
                        h.took.clone(),
                        h.error.clone(),
                    ]
                })
                .collect(),
        ),
        View::EndpointStatus(list) => (
            &[
                "endpoint",
                "ID",
                "version",
                "db size",
                "is leader",
                "is learner",
                "raft term",
                "raft index",
                "raft applied index",
                "errors",
            ],
            status_rows(list),
        ),
        View::EndpointHashKv(list) => (&["endpoint", "hash"], hash_rows(list)),
        View::DbStatus(status) => (
            &["hash", "revision", "total keys", "total size"],
            db_status_rows(&status),
        ),
        _ => return None,
    };
    Some(table(headings, &rows))
}

/// Draws the table. Cells are not wrapped (the tables etcdctl draws hold
/// IDs, URLs and numbers, which have no spaces to wrap at).
fn table(headings: &[&str], rows: &[Vec<String>]) -> String {
    let headings: Vec<String> = headings.iter().map(|h| h.to_uppercase()).collect();
    let widths: Vec<usize> = headings
        .iter()
        .enumerate()
        .map(|(i, h)| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .chain([h.chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let border = widths.iter().fold("+".to_owned(), |mut line, w| {
        line.push_str(&"-".repeat(w + 2));
        line.push('+');
        line
    });
    let mut out = String::new();
    out.push_str(&border);
    out.push('\n');
    out.push('|');
    for (h, w) in headings.iter().zip(&widths) {
        let gap = w - h.chars().count();
        let left = gap / 2;
        out.push_str(&format!(
            " {}{h}{} |",
            " ".repeat(left),
            " ".repeat(gap - left)
        ));
    }
    out.push('\n');
    out.push_str(&border);
    out.push('\n');
    for row in rows {
        out.push('|');
        for (cell, w) in row.iter().zip(&widths) {
            out.push_str(&format!(" {cell:>w$} |"));
        }
        out.push('\n');
    }
    out.push_str(&border);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_like_tablewriter() {
        let rows = vec![vec![
            "127.0.0.1:23790".to_owned(),
            "true".to_owned(),
            "1.346298ms".to_owned(),
            String::new(),
        ]];
        assert_eq!(
            table(&["endpoint", "health", "took", "error"], &rows),
            "+-----------------+--------+------------+-------+\n\
             |    ENDPOINT     | HEALTH |    TOOK    | ERROR |\n\
             +-----------------+--------+------------+-------+\n\
             | 127.0.0.1:23790 |   true | 1.346298ms |       |\n\
             +-----------------+--------+------------+-------+\n"
        );
    }
}
