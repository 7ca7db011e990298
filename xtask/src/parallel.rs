//! Work spread over a few threads: the guests, the fuzz targets.

use std::{sync::Mutex, thread};

use anyhow::{Result, anyhow};

/// Runs `work` on each of `items`, at most `workers` at a time, starting them in order; returns
/// the results in the items' order. An error ends the run once the items started have ended.
pub fn each<T: Send, R: Send>(
    items: Vec<T>,
    workers: usize,
    work: impl Fn(T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let count = items.len();
    let queue = Mutex::new(items.into_iter().enumerate().rev().collect::<Vec<_>>());
    let results = Mutex::new((0..count).map(|_| None).collect::<Vec<Option<R>>>());
    thread::scope(|scope| -> Result<()> {
        let runners: Vec<_> = (0..workers.clamp(1, count.max(1)))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let next = queue.lock().expect("the work queue").pop();
                        let Some((at, item)) = next else {
                            return Ok(());
                        };
                        let result = work(item);
                        if result.is_err() {
                            // The others take no new item.
                            queue.lock().expect("the work queue").clear();
                        }
                        results.lock().expect("the results")[at] = Some(result?);
                    }
                })
            })
            .collect();
        let mut first_error = None;
        for runner in runners {
            let ended = runner
                .join()
                .map_err(|_| anyhow!("a worker thread panicked"))
                .and_then(|r| r);
            if let Err(error) = ended {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    })?;
    Ok(results
        .into_inner()
        .expect("the results")
        .into_iter()
        .flatten()
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_the_items_order_and_an_error_ends_the_run() {
        let squares = each((1..=9u64).collect(), 3, |n| Ok(n * n)).unwrap();
        assert_eq!(squares, [1, 4, 9, 16, 25, 36, 49, 64, 81]);
        let failed = each((1..=9u64).collect(), 2, |n| {
            if n == 3 {
                anyhow::bail!("three");
            }
            Ok(n)
        });
        assert_eq!(failed.unwrap_err().to_string(), "three");
        assert!(each(Vec::<u8>::new(), 4, Ok).unwrap().is_empty());
    }
}
