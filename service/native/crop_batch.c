/* A batch of JPEGs read and cropped in one call, each with the crop and flip numpy draws for it.

Around the native crop, Python spent per sample about a fifth of the crop's own time: a generator
made, the header read, three draws, the call and its checks. Here one call takes the batch. Each
sample's draws come from numpy's PCG64 seeded with the four words its SeedSequence gives
(shardstream_seed_words below computes them for a batch at once, as sample_seeds.py does on numpy
arrays) and are drawn as numpy's Generator draws them (numpy/random/src/pcg64 and distributions.c):
`integers(0, n)` by Lemire's method on 32-bit halves of the 64-bit outputs, `random()` from a whole
64-bit one. transforms/jpeg_crop.py binds it;
tests/unit/service/node/test_native_batch.py compares its draws with numpy's own. */
#include <stddef.h>
#include <stdint.h>

#include "jpeg_crop.h"

typedef __uint128_t u128;
#define PCG_MULTIPLIER ((((u128)0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL)

struct pcg64 {
    u128 state, inc;
    int has_half; /* numpy keeps the upper half of a 64-bit output for the next 32-bit draw */
    uint32_t half;
};

static void pcg_step(struct pcg64 *g) { g->state = g->state * PCG_MULTIPLIER + g->inc; }

/* numpy's pcg64_set_seed: the state and the stream from SeedSequence.generate_state(4, uint64). */
static void pcg_seed(struct pcg64 *g, const uint64_t *words) {
    g->state = 0;
    g->inc = ((((u128)words[2] << 64) | words[3]) << 1) | 1;
    pcg_step(g);
    g->state += ((u128)words[0] << 64) | words[1];
    pcg_step(g);
    g->has_half = 0;
}

static uint64_t pcg_next64(struct pcg64 *g) {
    pcg_step(g);
    uint64_t x = (uint64_t)(g->state >> 64) ^ (uint64_t)g->state;
    unsigned rot = (unsigned)(g->state >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
}

static uint32_t pcg_next32(struct pcg64 *g) {
    if (g->has_half) {
        g->has_half = 0;
        return g->half;
    }
    uint64_t next = pcg_next64(g);
    g->has_half = 1;
    g->half = (uint32_t)(next >> 32);
    return (uint32_t)next;
}

/* Generator.integers(0, largest + 1) for largest < 2^32: nothing drawn when largest is 0. */
static uint32_t draw_at_most(struct pcg64 *g, uint32_t largest) {
    if (largest == 0) return 0;
    if (largest == UINT32_MAX) return pcg_next32(g);
    uint32_t bound = largest + 1;
    uint64_t m = (uint64_t)pcg_next32(g) * bound;
    uint32_t leftover = (uint32_t)m;
    if (leftover < bound) {
        uint32_t threshold = (UINT32_MAX - largest) % bound;
        while (leftover < threshold) {
            m = (uint64_t)pcg_next32(g) * bound;
            leftover = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* Generator.random() < 0.5: random() is (next64 >> 11) * 2^-53. */
static int draw_half(struct pcg64 *g) { return (pcg_next64(g) >> 11) < (1ULL << 52); }

/* The (top, left, flip) ImageTransform._crop_at draws for an image of image_height x image_width
from the generator seeded with `words`, into `out`. */
void shardstream_crop_draws(const uint64_t *words, int image_height, int image_width, int height, int width,
                            int random_crop, int flip, int32_t *out) {
    struct pcg64 g;
    pcg_seed(&g, words);
    if (random_crop) {
        out[0] = (int32_t)draw_at_most(&g, (uint32_t)(image_height - height));
        out[1] = (int32_t)draw_at_most(&g, (uint32_t)(image_width - width));
    } else {
        out[0] = (image_height - height) / 2;
        out[1] = (image_width - width) / 2;
    }
    out[2] = flip ? draw_half(&g) : 0;
}

/* numpy's SeedSequence (numpy/random/bit_generator.pyx): the entropy's uint32 words hashed into a
pool of four (mix_entropy), and generate_state(4, uint64) read from it. */
#define SEED_INIT_A 0x43B0D7E5u
#define SEED_MULT_A 0x931E8875u
#define SEED_INIT_B 0x8B51F9DDu
#define SEED_MULT_B 0x58F38DEDu
#define SEED_MIX_L 0xCA01F9DDu
#define SEED_MIX_R 0x4973F715u
#define SEED_POOL 4

static uint32_t seed_hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SEED_MULT_A;
    value *= *hash_const;
    return value ^ (value >> 16);
}

static uint32_t seed_mix(uint32_t x, uint32_t y) {
    uint32_t result = SEED_MIX_L * x - SEED_MIX_R * y;
    return result ^ (result >> 16);
}

/* For each of `n` samples, the four uint64 words SeedSequence(`prefix` words + [last[i]])
.generate_state(4, uint64) gives, into out[4 i ..]: the seed of that sample's PCG64 (sample_seeds.py
computes the same on numpy arrays where this library is not built). */
void shardstream_seed_words(const uint32_t *prefix, int n_prefix, const uint32_t *last, int n, uint64_t *out) {
    int total = n_prefix + 1;
    for (int i = 0; i < n; i++) {
        uint32_t pool[SEED_POOL], hash_const = SEED_INIT_A;
        for (int k = 0; k < SEED_POOL; k++)
            pool[k] = seed_hashmix(k < n_prefix ? prefix[k] : k == n_prefix ? last[i] : 0, &hash_const);
        for (int source = 0; source < SEED_POOL; source++)
            for (int target = 0; target < SEED_POOL; target++)
                if (source != target) pool[target] = seed_mix(pool[target], seed_hashmix(pool[source], &hash_const));
        for (int source = SEED_POOL; source < total; source++) {
            uint32_t word = source < n_prefix ? prefix[source] : last[i];
            for (int target = 0; target < SEED_POOL; target++)
                pool[target] = seed_mix(pool[target], seed_hashmix(word, &hash_const));
        }
        hash_const = SEED_INIT_B;
        uint32_t state[2 * SEED_POOL];
        for (int word = 0; word < 2 * SEED_POOL; word++) {
            uint32_t value = pool[word % SEED_POOL] ^ hash_const;
            hash_const *= SEED_MULT_B;
            value *= hash_const;
            state[word] = value ^ (value >> 16);
        }
        for (int word = 0; word < 4; word++)
            out[4 * (size_t)i + word] = (uint64_t)state[2 * word] | ((uint64_t)state[2 * word + 1] << 32);
    }
}

/* shardstream_jpeg_header for each of `n` JPEGs: `out` is n x 3 (width, height, kind). */
void shardstream_jpeg_headers(int n, const uint8_t *const *data, const uint64_t *sizes, int32_t *out) {
    for (int i = 0; i < n; i++) shardstream_jpeg_header(data[i], (unsigned long)sizes[i], out + 3 * i);
}

/* Crop each of `n` JPEGs whose `take[i]` is set, of the size its header gave (`headers`, as
shardstream_jpeg_headers writes them), with the draws of
the generator seeded with `seeds[4 i ..]`, into the i-th `channels` x `height` x `width` block of
`out`, and the whole image into `wholes[i]` where `wholes` and it are not NULL. `status[i]` is
CROP_DONE, or CROP_NOT_HERE (not taken, or not decoded: decode it another way). Returns how many
were cropped. */
int shardstream_jpeg_crop_batch(int n, const uint8_t *const *data, const uint64_t *sizes, const uint8_t *take,
                                const int32_t *headers, const uint64_t *seeds, int channels, int height, int width,
                                int random_crop, int flip, uint8_t *out, uint8_t *const *wholes,
                                int32_t *status) {
    size_t block = (size_t)channels * (size_t)height * (size_t)width;
    int done = 0;
    for (int i = 0; i < n; i++) {
        status[i] = CROP_NOT_HERE;
        if (!take[i]) continue;
        int image_width = headers[3 * i], image_height = headers[3 * i + 1];
        if (image_height < height || image_width < width) continue;
        int32_t at[3];
        shardstream_crop_draws(seeds + 4 * i, image_height, image_width, height, width, random_crop, flip, at);
        status[i] = shardstream_jpeg_crop(data[i], (unsigned long)sizes[i], channels, image_width, image_height,
                                          at[0], at[1], height, width, at[2], out + block * (size_t)i,
                                          wholes != NULL ? wholes[i] : NULL);
        done += status[i] == CROP_DONE;
    }
    return done;
}

/* For each of `n` decoded images (`pixels[i]`: rows of dims[2 i] (width) x channels, dims[2 i + 1]
rows) whose `take[i]` is set, the crop and flip drawn as above, into the i-th block of `out`: the
augment of samples the prepared-sample cache held. The caller checked each image's size. */
void shardstream_crop_pixels_batch(int n, const uint8_t *const *pixels, const int32_t *dims, const uint8_t *take,
                                   const uint64_t *seeds, int channels, int height, int width, int random_crop,
                                   int flip, uint8_t *out) {
    size_t block = (size_t)channels * (size_t)height * (size_t)width;
    for (int i = 0; i < n; i++) {
        if (!take[i]) continue;
        int image_width = dims[2 * i], image_height = dims[2 * i + 1];
        int32_t at[3];
        shardstream_crop_draws(seeds + 4 * i, image_height, image_width, height, width, random_crop, flip, at);
        shardstream_crop_pixels(pixels[i], image_width, channels, at[0], at[1], height, width, at[2],
                                out + block * (size_t)i);
    }
}
