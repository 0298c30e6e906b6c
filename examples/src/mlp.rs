//! A two-layer perceptron (tanh hidden layer) fitted by mean squared error
//! to a synthetic teacher, `y = sin(A x)`. Forward and backward passes run
//! on the host in f64 from f32 parameters and give f32 gradients: the same
//! code and inputs on every rank give bit-identical results, so any
//! difference between ranks' parameters would come from the communication.

use std::hash::Hasher;

use fnv::FnvHasher;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Input features.
pub const IN: usize = 16;
/// Hidden units.
pub const HIDDEN: usize = 64;
/// Outputs.
pub const OUT: usize = 4;

/// Parameter shapes in model order: `W1 [HIDDEN, IN]`, `b1 [HIDDEN]`,
/// `W2 [OUT, HIDDEN]`, `b2 [OUT]` (row-major).
pub const SHAPES: [&[usize]; 4] = [&[HIDDEN, IN], &[HIDDEN], &[OUT, HIDDEN], &[OUT]];

/// Elements of a shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// A generator seeded with `seed`: data and initial parameters depend
/// only on their seed, so every rank can make the same ones.
fn seeded(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Uniform in `[lo, hi)`.
fn uniform(rng: &mut StdRng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

/// Parameters drawn uniformly in `±1/sqrt(fan_in)` (biases zero), from
/// `seed`.
pub fn init_params(seed: u64) -> Vec<Vec<f32>> {
    let mut rng = seeded(seed);
    let fan_in = [IN, 1, HIDDEN, 1];
    SHAPES
        .iter()
        .zip(fan_in)
        .enumerate()
        .map(|(p, (shape, fan))| {
            let bound = 1.0 / (fan as f64).sqrt();
            (0..numel(shape))
                .map(|_| {
                    if p % 2 == 1 {
                        0.0
                    } else {
                        uniform(&mut rng, -bound, bound) as f32
                    }
                })
                .collect()
        })
        .collect()
}

/// Samples of one rank: `x` is `samples x IN`, `y` is `samples x OUT`.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub x: Vec<f64>,
    pub y: Vec<f64>,
    pub samples: usize,
}

/// Rank `rank`'s shard: inputs of its own, targets from the teacher every
/// rank shares (`teacher_seed`), plus a little noise.
pub fn shard(teacher_seed: u64, rank: usize, samples: usize) -> Dataset {
    let mut t = seeded(teacher_seed);
    let a: Vec<f64> = (0..OUT * IN).map(|_| uniform(&mut t, -0.6, 0.6)).collect();
    let mut rng = seeded(teacher_seed ^ ((rank as u64 + 1) << 32));
    let mut x = Vec::with_capacity(samples * IN);
    let mut y = Vec::with_capacity(samples * OUT);
    for _ in 0..samples {
        let xs: Vec<f64> = (0..IN).map(|_| uniform(&mut rng, -1.0, 1.0)).collect();
        for o in 0..OUT {
            let z: f64 = (0..IN).map(|k| a[o * IN + k] * xs[k]).sum();
            y.push(z.sin() + uniform(&mut rng, -0.01, 0.01));
        }
        x.extend(xs);
    }
    Dataset { x, y, samples }
}

/// Mean squared error `1/(2B) sum |f(x) - y|^2` of `params` on `data`, and
/// its gradient with respect to every parameter (same shapes).
pub fn loss_and_grads(params: &[Vec<f32>], data: &Dataset) -> (f64, Vec<Vec<f32>>) {
    let (w1, b1, w2, b2) = (&params[0], &params[1], &params[2], &params[3]);
    let mut g = [
        vec![0.0f64; HIDDEN * IN],
        vec![0.0f64; HIDDEN],
        vec![0.0f64; OUT * HIDDEN],
        vec![0.0f64; OUT],
    ];
    let batch = data.samples as f64;
    let mut loss = 0.0;
    let mut h = [0.0f64; HIDDEN];
    for s in 0..data.samples {
        let x = &data.x[s * IN..(s + 1) * IN];
        let y = &data.y[s * OUT..(s + 1) * OUT];
        for (j, hj) in h.iter_mut().enumerate() {
            let z: f64 = b1[j] as f64 + (0..IN).map(|k| w1[j * IN + k] as f64 * x[k]).sum::<f64>();
            *hj = z.tanh();
        }
        let mut dh = [0.0f64; HIDDEN];
        for o in 0..OUT {
            let out: f64 = b2[o] as f64
                + (0..HIDDEN)
                    .map(|j| w2[o * HIDDEN + j] as f64 * h[j])
                    .sum::<f64>();
            let r = out - y[o];
            loss += r * r / (2.0 * batch);
            let d = r / batch;
            g[3][o] += d;
            for j in 0..HIDDEN {
                g[2][o * HIDDEN + j] += d * h[j];
                dh[j] += d * w2[o * HIDDEN + j] as f64;
            }
        }
        for j in 0..HIDDEN {
            let dz = dh[j] * (1.0 - h[j] * h[j]);
            g[1][j] += dz;
            for k in 0..IN {
                g[0][j * IN + k] += dz * x[k];
            }
        }
    }
    let grads = g
        .iter()
        .map(|v| v.iter().map(|&x| x as f32).collect())
        .collect();
    (loss, grads)
}

/// FNV-1a over the bit patterns of every parameter: equal on two ranks
/// exactly when their parameters are bitwise identical (up to hash
/// collisions).
pub fn fingerprint(params: &[Vec<f32>]) -> u64 {
    let mut h = FnvHasher::default();
    for v in params.iter().flatten() {
        h.write(&v.to_bits().to_le_bytes());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gradients_match_finite_differences() {
        let data = shard(3, 0, 32);
        let mut params = init_params(11);
        // Non-zero biases, so their gradients are exercised too.
        for (k, b) in params[1].iter_mut().enumerate() {
            *b = 0.01 * k as f32;
        }
        let (_, grads) = loss_and_grads(&params, &data);
        let eps = 1e-3f32;
        for p in 0..4 {
            for &i in &[0usize, 1, numel(SHAPES[p]) / 2, numel(SHAPES[p]) - 1] {
                let mut plus = params.clone();
                plus[p][i] += eps;
                let mut minus = params.clone();
                minus[p][i] -= eps;
                // The step actually taken, after f32 rounding.
                let step = (plus[p][i] as f64) - (minus[p][i] as f64);
                let fd = (loss_and_grads(&plus, &data).0 - loss_and_grads(&minus, &data).0) / step;
                let an = grads[p][i] as f64;
                assert!(
                    (fd - an).abs() <= 1e-4 + 1e-3 * an.abs(),
                    "param {p} element {i}: finite difference {fd}, gradient {an}"
                );
            }
        }
    }

    /// The example's training, simulated on the host (gradients averaged
    /// over 4 ranks in f64, its default steps and rate): the loss must fall
    /// to a tenth, well past the example's own bar of a quarter.
    #[test]
    fn averaged_sgd_cuts_the_loss_tenfold() {
        let world = 4;
        let shards: Vec<Dataset> = (0..world).map(|r| shard(5, r, 256)).collect();
        let mut params = init_params(1);
        let global = |p: &[Vec<f32>]| {
            shards.iter().map(|d| loss_and_grads(p, d).0).sum::<f64>() / world as f64
        };
        let start = global(&params);
        for _ in 0..200 {
            let all: Vec<Vec<Vec<f32>>> = shards
                .iter()
                .map(|d| loss_and_grads(&params, d).1)
                .collect();
            for p in 0..4 {
                for i in 0..params[p].len() {
                    let mean: f64 = all.iter().map(|g| g[p][i] as f64).sum::<f64>() / world as f64;
                    params[p][i] -= (0.5 * mean) as f32;
                }
            }
        }
        let end = global(&params);
        // Measured: 0.78 -> 0.039.
        assert!(end < start * 0.1, "loss {start} -> {end}");
    }

    #[test]
    fn data_and_parameters_depend_only_on_their_seeds() {
        assert_eq!(shard(1, 2, 10).x, shard(1, 2, 10).x);
        assert_ne!(shard(1, 2, 10).x, shard(1, 3, 10).x);
        assert_eq!(init_params(4), init_params(4));
        assert_ne!(fingerprint(&init_params(4)), fingerprint(&init_params(5)));
    }
}
