//! The dense linear algebra GPTQ needs, on row-major square `f32` matrices: a Cholesky
//! factorization and the upper Cholesky factor of an inverse.

/// Why a factorization failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LinalgError {
    #[error("matrix is not positive definite (pivot {index} is {value})")]
    NotPositiveDefinite { index: usize, value: f32 },
}

/// Lower Cholesky factor `L` of `a` (`a = L Lᵀ`), `n × n`, row-major; the upper triangle of
/// the result is zero.
pub fn cholesky(a: &[f32], n: usize) -> Result<Vec<f32>, LinalgError> {
    let mut l = vec![0f32; n * n];
    for i in 0..n {
        for j in 0..=i {
            let (ri, rj) = (&l[i * n..i * n + j], &l[j * n..j * n + j]);
            let v = a[i * n + j] as f64 - dot(ri, rj) as f64;
            l[i * n + j] = if i == j {
                if v.is_nan() || v <= 0.0 {
                    return Err(LinalgError::NotPositiveDefinite {
                        index: i,
                        value: v as f32,
                    });
                }
                v.sqrt() as f32
            } else {
                (v / l[j * n + j] as f64) as f32
            };
        }
    }
    Ok(l)
}

/// `Σ a_i b_i` with 16 independent partial sums (vectorizes; f32 as in the reference GPTQ).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..16 {
            acc[k] += x[k] * y[k];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Inverse of a lower-triangular `l` (itself lower triangular), solving `L M = I` row by row.
pub fn invert_lower(l: &[f32], n: usize) -> Vec<f32> {
    let mut m = vec![0f32; n * n];
    let mut acc = vec![0f32; n];
    for i in 0..n {
        acc[..=i].iter_mut().for_each(|v| *v = 0.0);
        acc[i] = 1.0;
        for k in 0..i {
            let lik = l[i * n + k];
            if lik != 0.0 {
                let row_k = &m[k * n..k * n + k + 1];
                acc[..=k]
                    .iter_mut()
                    .zip(row_k)
                    .for_each(|(a, v)| *a -= lik * v);
            }
        }
        let d = l[i * n + i];
        for j in 0..=i {
            m[i * n + j] = acc[j] / d;
        }
    }
    m
}

/// The upper-triangular `U` with `Uᵀ U = a⁻¹` for a symmetric positive definite `a`.
///
/// With `J` the reversal permutation, `J a J = L' L'ᵀ` gives `a = R Rᵀ` for the upper
/// triangular `R = J L' J`, so `a⁻¹ = R⁻ᵀ R⁻¹` and `U = R⁻¹ = J L'⁻¹ J`: one factorization
/// and one triangular inverse.
pub fn inverse_upper_cholesky(a: &[f32], n: usize) -> Result<Vec<f32>, LinalgError> {
    let rev = |m: &[f32]| -> Vec<f32> {
        let mut out = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                out[i * n + j] = m[(n - 1 - i) * n + (n - 1 - j)];
            }
        }
        out
    };
    let l = cholesky(&rev(a), n)?;
    Ok(rev(&invert_lower(&l, n)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spd(n: usize) -> Vec<f32> {
        let b: Vec<f32> = (0..n * n)
            .map(|i| ((i * 31 % 23) as f32 - 11.0) / 7.0)
            .collect();
        let mut a = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                a[i * n + j] = (0..n).map(|k| b[i * n + k] * b[j * n + k]).sum::<f32>()
                    + if i == j { 1.0 } else { 0.0 };
            }
        }
        a
    }

    fn mul(a: &[f32], b: &[f32], n: usize) -> Vec<f32> {
        let mut c = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                c[i * n + j] = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
            }
        }
        c
    }

    fn transpose(a: &[f32], n: usize) -> Vec<f32> {
        (0..n * n).map(|i| a[(i % n) * n + i / n]).collect()
    }

    #[test]
    fn cholesky_reconstructs() {
        let n = 9;
        let a = spd(n);
        let l = cholesky(&a, n).unwrap();
        let back = mul(&l, &transpose(&l, n), n);
        for (x, y) in a.iter().zip(&back) {
            assert!((x - y).abs() < 1e-3 * x.abs().max(1.0), "{x} vs {y}");
        }
    }

    #[test]
    fn upper_factor_of_inverse() {
        let n = 12;
        let a = spd(n);
        let u = inverse_upper_cholesky(&a, n).unwrap();
        for i in 0..n {
            for j in 0..i {
                assert_eq!(u[i * n + j], 0.0, "U is upper triangular");
            }
        }
        // Uᵀ U a = I
        let prod = mul(&mul(&transpose(&u, n), &u, n), &a, n);
        for i in 0..n {
            for j in 0..n {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!(
                    (prod[i * n + j] - want).abs() < 1e-3,
                    "({i},{j}) {}",
                    prod[i * n + j]
                );
            }
        }
    }

    #[test]
    fn indefinite_is_an_error() {
        let a = [1.0, 2.0, 2.0, 1.0];
        assert!(matches!(
            cholesky(&a, 2),
            Err(LinalgError::NotPositiveDefinite { index: 1, .. })
        ));
    }
}
