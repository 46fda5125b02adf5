//! A generator of long two-person conversations shaped like the public
//! long-conversation QA set issue 52 was checked on (LoCoMo-like): many
//! sessions over simulated months, each opened with its date; two people
//! chatting about their lives in messages of two or three sentences; facts
//! and events planted at pseudo-random turns, some restated later, some
//! updated (the question asks for the newer value); and questions in four
//! categories whose evidence turns are marked:
//!
//! - single fact: one evidence turn;
//! - multi-hop: two evidence turns (two items of one topic, a bridge
//!   through a person, or one fact of each speaker);
//! - temporal: when an event happened (the evidence turn says "yesterday"
//!   or "last weekend"; the date opens its session's first message);
//! - open domain: what a person would likely do or enjoy, inferred from a
//!   turn that shares few words with the question.
//!
//! Deterministic: conversation `c` is the same on every run (seeded).
//! Small talk reuses the facts' topic words ("we should go camping some
//! time"), so the evidence competes with chatter, as in real talk.

use serde_json::{Value, json};

/// Conversations generated.
pub const CONVERSATIONS: usize = 8;

/// The question categories, in the order the tables list them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Single,
    Multi,
    Temporal,
    Open,
}

impl Category {
    pub const ALL: [Category; 4] = [Self::Single, Self::Multi, Self::Temporal, Self::Open];

    pub fn name(self) -> &'static str {
        match self {
            Self::Single => "single fact",
            Self::Multi => "multi-hop",
            Self::Temporal => "temporal",
            Self::Open => "open domain",
        }
    }
}

/// One question: its text, category, and evidence as groups of sentences
/// (each with the message that says it): the evidence is in view when
/// every group has a sentence in view (a restated fact gives its group
/// more than one).
pub struct Question {
    pub text: String,
    pub category: Category,
    pub evidence: Vec<Vec<(usize, String)>>,
}

/// One generated conversation: messages (no system message) and questions.
pub struct Conversation {
    pub messages: Vec<Value>,
    pub questions: Vec<Question>,
}

/// A 64-bit LCG: small, seeded, the same everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n.max(1)
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.next(from.len())]
    }
}

const PEOPLE: [(&str, &str); CONVERSATIONS] = [
    ("Maya", "Theo"),
    ("Ines", "Rafael"),
    ("Jonah", "Priya"),
    ("Clara", "Sam"),
    ("Nadia", "Lukas"),
    ("Omar", "Elena"),
    ("Grace", "Mateo"),
    ("Hana", "Viktor"),
];

/// Small talk: `{b}` the other person. Topic words of the facts recur.
const CHATTER: &[&str] = &[
    "How was your week, {b}?",
    "Work has been busy, too many meetings.",
    "The weather finally turned nice, we walked along the river.",
    "I cooked pasta again, nothing fancy.",
    "My phone keeps dying, I need a new one.",
    "We should grab coffee soon.",
    "The train was late again this morning.",
    "Have you watched the new season of that show?",
    "I slept badly, the neighbours had a party.",
    "That sounds lovely, {b}!",
    "Haha, same here.",
    "I am so tired of emails.",
    "Let me know how it goes, {b}.",
    "My parents are visiting for a few days.",
    "I tried the new bakery near the station.",
    "Traffic downtown is getting worse every month.",
    "We watched an old movie and ordered pizza.",
    "Honestly I just want a long holiday.",
    "I keep forgetting to water the plants.",
    "We should go camping some time, it has been ages.",
    "Did you see the marathon on TV last weekend?",
    "My neighbour got a new dog, it barks all night.",
    "Nothing like a good book on a rainy day.",
    "How is work treating you these days?",
    "I want to learn an instrument one day.",
    "My cousin keeps sending me recipes.",
    "Family dinners are chaotic but fun.",
    "I am thinking about taking a class of some kind.",
    "Music always cheers me up after a long day.",
    "We had a small party for a friend at the weekend.",
    "The kids in our street play football until dark.",
    "I should call my sister more often.",
    "I love hearing about your trips, {b}.",
    "That must have been exhausting.",
    "I am proud of you, really.",
    "Weekends go by far too quickly.",
    "I read somewhere that walking every day helps a lot.",
    "The city is so crowded in summer.",
    "Tell me more, {b}, I want the whole story.",
    "I finally cleaned out the garage.",
    // Names, places and titles, as real small talk has them.
    "We watched Dune on Netflix, the sound was amazing.",
    "My friend Karen is moving to Barcelona in the spring.",
    "I keep listening to Taylor Swift on Spotify, no shame.",
    "We had brunch at Café Nero on Sunday.",
    "The Christmas market in Vienna looked lovely on Instagram.",
    "Dave from work ran the London Marathon once.",
    "My aunt Gloria sent a postcard from Lisbon.",
    "We might drive to Edinburgh for Easter.",
    "I bought a Kindle Paperwhite in the Black Friday sale.",
    "Our neighbour Mr Patel grows huge pumpkins.",
    "I saw a documentary about Iceland on the BBC.",
    "Anna and Jake invited us to their barbecue on Saturday.",
];

/// Values a fact slot takes; each conversation picks its own.
const PETS: &[&str] = &["cat", "dog", "rabbit", "parrot"];
const PET_NAMES: &[&str] = &[
    "Miso", "Pepper", "Juno", "Olive", "Biscuit", "Noodle", "Luna", "Ziggy",
];
const JOBS: &[&str] = &[
    "nurse",
    "teacher",
    "architect",
    "pharmacist",
    "chef",
    "librarian",
    "electrician",
    "accountant",
];
const CITIES: &[&str] = &[
    "Porto", "Oslo", "Lyon", "Tartu", "Ghent", "Bergen", "Graz", "Split", "Malmo", "Cork",
];
const CLASSES: &[&str] = &[
    "pottery",
    "salsa",
    "woodwork",
    "life drawing",
    "photography",
    "ceramics",
];
const BOOKS: &[(&str, &str)] = &[
    ("The Remains of the Day", "Ishiguro"),
    ("The Dispossessed", "Le Guin"),
    ("My Brilliant Friend", "Ferrante"),
    ("Norwegian Wood", "Murakami"),
    ("Station Eleven", "Mandel"),
];
const DISHES: &[&str] = &["shakshuka", "ramen", "paella", "pierogi", "lasagne", "pho"];
const INSTRUMENTS: &[&str] = &["cello", "ukulele", "banjo", "harp", "violin", "drums"];
const PLACES: &[&str] = &[
    "Lake Bled",
    "the Dolomites",
    "Loch Lomond",
    "the Ardennes",
    "Cinque Terre",
    "the Tatras",
];
const RELATIVES: &[&str] = &[
    "Daniel", "Tomas", "Karim", "Felix", "Anya", "Lena", "Rosa", "Ivo",
];
const SPORTS: &[&str] = &["half marathon", "triathlon", "charity swim", "cycling race"];

const MONTHS: [(&str, usize); 12] = [
    ("January", 31),
    ("February", 28),
    ("March", 31),
    ("April", 30),
    ("May", 31),
    ("June", 30),
    ("July", 31),
    ("August", 31),
    ("September", 30),
    ("October", 31),
    ("November", 30),
    ("December", 31),
];

/// Day `d` of 2023 (0 = 1 January), as "7 May 2023".
fn date(d: usize) -> String {
    let mut d = d % 365;
    for (name, len) in MONTHS {
        if d < len {
            return format!("{} {name} 2023", d + 1);
        }
        d -= len;
    }
    String::new()
}

/// A planted statement: who says it (0 = first speaker, the `user`), its
/// sentence, and the earliest session it may go in.
struct Plant {
    who: usize,
    sentence: String,
    session: usize,
}

/// A question over plants (by index into the plant list; each inner list
/// is one evidence group).
struct Ask {
    text: String,
    category: Category,
    groups: Vec<Vec<usize>>,
}

/// Conversation `c`, the same on every run.
pub fn conversation(c: usize) -> Conversation {
    let (a, b) = PEOPLE[c];
    let names = [a, b];
    let mut rng = Rng(0x10c0_0000 + c as u64 * 7919);
    let sessions = 18 + rng.next(8);
    let mut plants: Vec<Plant> = Vec::new();
    let mut asks: Vec<Ask> = Vec::new();
    let plant = |plants: &mut Vec<Plant>, who: usize, sentence: String, session: usize| {
        plants.push(Plant {
            who,
            sentence,
            session,
        });
        plants.len() - 1
    };
    // Distinct values per conversation: rotate the pools by `c`.
    let v = |pool: &[&'static str], k: usize| pool[(c * 3 + k) % pool.len()];
    let late = |rng: &mut Rng| rng.next(sessions - 1);
    for (who, &x) in names.iter().enumerate() {
        let k = who * 5;
        // Single facts.
        let (pet, pet_name) = (v(PETS, k), v(PET_NAMES, k));
        let s = late(&mut rng);
        let p = plant(
            &mut plants,
            who,
            format!("We adopted a {pet} from the shelter and named her {pet_name}."),
            s,
        );
        let again = plant(
            &mut plants,
            who,
            format!("{pet_name} sleeps on my desk while I work, the little rascal."),
            s + 1,
        );
        asks.push(Ask {
            text: format!("What is the name of {x}'s {pet}?"),
            category: Category::Single,
            groups: vec![vec![p, again]],
        });
        let (old, new) = (v(JOBS, k), v(JOBS, k + 1));
        let s = rng.next(sessions / 2);
        plant(
            &mut plants,
            who,
            format!("I work as a {old} at the moment, long shifts but I like it."),
            s,
        );
        let p = plant(
            &mut plants,
            who,
            format!("Big news: I left my old job and I am a {new} now."),
            s + sessions / 3,
        );
        asks.push(Ask {
            text: format!("What does {x} do for a living now?"),
            category: Category::Single,
            groups: vec![vec![p]],
        });
        let class = v(CLASSES, k);
        let class_at = plant(
            &mut plants,
            who,
            format!("I signed up for a {class} class at the community centre."),
            late(&mut rng),
        );
        asks.push(Ask {
            text: format!("Which class did {x} sign up for?"),
            category: Category::Single,
            groups: vec![vec![class_at]],
        });
        let (title, author) = BOOKS[(c + k) % BOOKS.len()];
        let p = plant(
            &mut plants,
            who,
            format!("I am reading {title} by {author} on the bus, it is wonderful."),
            late(&mut rng),
        );
        asks.push(Ask {
            text: format!("Which novel has {x} been reading?"),
            category: Category::Single,
            groups: vec![vec![p]],
        });
        let dish = v(DISHES, k);
        let p = plant(
            &mut plants,
            who,
            format!("My favourite dish is {dish}, I could eat it every single day."),
            late(&mut rng),
        );
        asks.push(Ask {
            text: format!("What is {x}'s favourite food?"),
            category: Category::Single,
            groups: vec![vec![p]],
        });
        // Multi-hop: two items of one topic.
        let (i1, i2) = (v(INSTRUMENTS, k), v(INSTRUMENTS, k + 1));
        let s = rng.next(sessions * 2 / 3);
        let p1 = plant(
            &mut plants,
            who,
            format!("I started learning the {i1} this month, my first instrument ever."),
            s,
        );
        let p2 = plant(
            &mut plants,
            who,
            format!("I also bought a second-hand {i2}, music keeps me sane."),
            s + 1 + rng.next(sessions / 3),
        );
        asks.push(Ask {
            text: format!("Which musical instruments does {x} play?"),
            category: Category::Multi,
            groups: vec![vec![p1], vec![p2]],
        });
        // No word shared with either turn, as many real questions.
        asks.push(Ask {
            text: format!("What new hobbies has {x} taken up?"),
            category: Category::Multi,
            groups: vec![vec![class_at], vec![p1]],
        });
        let (c1, c2) = (v(PLACES, k), v(PLACES, k + 2));
        let s = rng.next(sessions * 2 / 3);
        let p1 = plant(
            &mut plants,
            who,
            format!("We went camping at {c1} and the stars were unreal."),
            s,
        );
        let p2 = plant(
            &mut plants,
            who,
            format!("Our second camping trip, to {c2}, was rainy but fun."),
            s + 1 + rng.next(sessions / 3),
        );
        asks.push(Ask {
            text: format!("Where has {x} gone camping?"),
            category: Category::Multi,
            groups: vec![vec![p1], vec![p2]],
        });
        // Multi-hop: a bridge through a relative.
        let (rel, city) = (v(RELATIVES, k), v(CITIES, k));
        let s = rng.next(sessions * 2 / 3);
        let p1 = plant(
            &mut plants,
            who,
            format!("My cousin {rel} trained as a pastry chef in Paris."),
            s,
        );
        let p2 = plant(
            &mut plants,
            who,
            format!("{rel} just opened a bakery in {city}, I am so happy for them."),
            s + 1 + rng.next(sessions / 3),
        );
        asks.push(Ask {
            text: format!("In which city did {x}'s cousin, the pastry chef, open a bakery?"),
            category: Category::Multi,
            groups: vec![vec![p1], vec![p2]],
        });
        // Temporal: the date is said in the turn.
        let sport = v(SPORTS, k);
        let s = late(&mut rng);
        let p = plant(
            &mut plants,
            who,
            format!("Yesterday I finished my first {sport}, legs still aching."),
            s,
        );
        asks.push(Ask {
            text: format!("When did {x} complete a {sport}?"),
            category: Category::Temporal,
            groups: vec![vec![p]],
        });
        let place = v(CITIES, k + 4);
        let s = late(&mut rng);
        let p = plant(
            &mut plants,
            who,
            format!("We got back from {place} last night, what a trip."),
            s,
        );
        asks.push(Ask {
            text: format!("When did {x} return from the trip to {place}?"),
            category: Category::Temporal,
            groups: vec![vec![p]],
        });
        let rel2 = v(RELATIVES, k + 3);
        let s = late(&mut rng);
        let p = plant(
            &mut plants,
            who,
            format!("My brother {rel2} got married last weekend, I cried the whole ceremony."),
            s,
        );
        asks.push(Ask {
            text: format!("When was the wedding of {x}'s brother?"),
            category: Category::Temporal,
            groups: vec![vec![p]],
        });
        // Open domain: inferred, few shared words.
        let open: [(&str, &str); 4] = [
            (
                "Nothing beats a long trail in the mountains, I go up every weekend.",
                "Would {x} enjoy a hiking holiday?",
            ),
            (
                "I volunteer at the animal shelter because I cannot stand seeing strays suffer.",
                "Does {x} care about the welfare of animals?",
            ),
            (
                "I grew up by the sea and still swim in it every morning, even in January.",
                "Is {x} likely to be comfortable in cold water?",
            ),
            (
                "I have been saving every penny to go back to university for psychology.",
                "What subject might {x} study next?",
            ),
        ];
        for (k2, (says, asked)) in open.iter().enumerate() {
            if (k2 + who + c) % 2 == 0 {
                let p = plant(&mut plants, who, (*says).to_string(), late(&mut rng));
                asks.push(Ask {
                    text: asked.replace("{x}", x),
                    category: Category::Open,
                    groups: vec![vec![p]],
                });
            }
        }
    }
    // Multi-hop: one fact of each speaker.
    let (n1, n2) = (2 + c % 3, 1 + (c + 1) % 3);
    let p1 = plant(
        &mut plants,
        0,
        format!("With {n1} children at home there is never a quiet moment."),
        rng.next(sessions - 1),
    );
    let p2 = plant(
        &mut plants,
        1,
        format!("We have {n2} children, and they all want different dinners."),
        rng.next(sessions - 1),
    );
    asks.push(Ask {
        text: format!("How many children do {a} and {b} have together?"),
        category: Category::Multi,
        groups: vec![vec![p1], vec![p2]],
    });
    build(c, sessions, &plants, &asks, &mut rng)
}

/// Lays the plants out over sessions of small talk and resolves the
/// questions' evidence to message indices.
fn build(c: usize, sessions: usize, plants: &[Plant], asks: &[Ask], rng: &mut Rng) -> Conversation {
    let (a, b) = PEOPLE[c];
    let names = [a, b];
    let mut day = 60 + rng.next(30);
    let mut messages: Vec<Value> = Vec::new();
    let mut at: Vec<(usize, String)> = vec![(0, String::new()); plants.len()];
    for s in 0..sessions {
        day += 4 + rng.next(10);
        // The plants of this session, each at its own message.
        let mine: Vec<usize> = (0..plants.len())
            .filter(|&i| plants[i].session.min(sessions - 2) == s)
            .collect();
        let exchanges = (10 + rng.next(8)).max(mine.len() + 2);
        let mut slots: Vec<usize> = Vec::new();
        for &i in &mine {
            loop {
                let t = 2 * (1 + rng.next(exchanges - 1)) + plants[i].who;
                if !slots.contains(&t) {
                    slots.push(t);
                    break;
                }
            }
        }
        for t in 0..2 * exchanges {
            let who = t % 2;
            let (x, other) = (names[who], names[1 - who]);
            let mut text = format!("{x}: ");
            if t == 0 {
                text.push_str(&format!("[{}] Hi {other}! ", date(day)));
            }
            let chatter = |rng: &mut Rng| rng.pick(CHATTER).replace("{b}", other);
            text.push_str(&chatter(rng));
            if let Some(k) = slots.iter().position(|&u| u == t) {
                let i = mine[k];
                let sentence = plants[i].sentence.clone();
                text.push(' ');
                text.push_str(&sentence);
                at[i] = (messages.len(), sentence);
            }
            text.push(' ');
            text.push_str(&chatter(rng));
            if rng.next(2) == 0 {
                text.push(' ');
                text.push_str(&chatter(rng));
            }
            let role = if who == 0 { "user" } else { "assistant" };
            messages.push(json!({"role": role, "content": text}));
        }
    }
    let questions = asks
        .iter()
        .map(|q| Question {
            text: q.text.clone(),
            category: q.category,
            evidence: q
                .groups
                .iter()
                .map(|g| g.iter().map(|&i| at[i].clone()).collect())
                .collect(),
        })
        .collect();
    Conversation {
        messages,
        questions,
    }
}
