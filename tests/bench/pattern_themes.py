"""Assistant-style conversation material for the pattern-detection set (tests/bench/pattern_set.py).

Each theme is a subject a user can come back to over many sessions; each of
its sessions is a different step of it, worded its own way (a trip: flights,
then a rail pass, then a ryokan, ...), so sessions on one theme share the
subject more than the words. Themes come in near-miss pairs that share
vocabulary but not the subject ("trip to Japan" / "Japanese cooking",
"marathon running" / "running a business", "Python code" / "a pet python").
A session here is its substance: (user asks, assistant answers, user follows
up); the set wraps it in the filler assistants talk with.

The themes and one-offs are in two halves with no text in common (the filler is
shared), so a method chosen on one half can be confirmed on the other.
"""

from __future__ import annotations

Session = tuple[str, str, str]

HALF_A: dict[str, list[Session]] = {
    "japan_trip": [
        (
            "I'm planning a two week trip to Japan in April and need help with flights from Chicago.",
            "For April, nonstop flights from Chicago to Tokyo Haneda run about 13 hours; booking two to three months ahead usually gets the best fares.",
            "Would landing at Narita instead save money?",
        ),
        (
            "Is the Japan Rail Pass still worth it for Tokyo, Kyoto, Osaka and Hiroshima?",
            "After the price increase the 14-day pass pays off only if you add a long leg like Hiroshima or a round trip to Kanazawa; otherwise individual shinkansen tickets are cheaper.",
            "Can I reserve shinkansen seats online before I arrive?",
        ),
        (
            "We want to stay one night in a traditional ryokan near Kyoto. Any tips?",
            "Look at ryokan in Arashiyama or the Kurama hot spring area; most include a kaiseki dinner and breakfast, and you should book directly about two months ahead.",
            "Do ryokan usually allow tattoos in the onsen baths?",
        ),
        (
            "Can you draft a day-by-day itinerary for five days in Tokyo for my Japan trip?",
            "Day one Asakusa and Senso-ji, day two Shibuya and Harajuku, day three a day trip to Nikko, day four Tsukiji outer market and Ginza, day five teamLab and Odaiba.",
            "Swap Nikko for Kamakura, my wife prefers the coast.",
        ),
        (
            "What's a realistic daily budget for two people travelling around Japan?",
            "Mid-range travellers spend roughly 25,000 to 35,000 yen a day for two, covering business hotels, convenience store breakfasts, restaurant dinners and local trains.",
            "Should I carry cash or is a credit card fine in Japan?",
        ),
        (
            "What should I pack for Japan in spring? We'll be walking a lot.",
            "Pack layers because April runs from 8 to 20 degrees, comfortable slip-on shoes for temples, a small towel, a coin purse and a foldable bag since shops charge for plastic bags.",
            "Do I need a power adapter for Japanese outlets?",
        ),
        (
            "When is cherry blossom season in Kyoto this year? I want to time our Japan visit.",
            "Forecasts put full bloom in Kyoto around the first week of April; Tokyo usually peaks a few days earlier, so plan Kyoto for the end of your first week.",
            "Which spots in Kyoto are less crowded for hanami?",
        ),
        (
            "Do US citizens need a visa for a tourist trip to Japan, and what about Visit Japan Web?",
            "US passport holders get a 90-day visa waiver; fill in Visit Japan Web before departure so immigration and customs QR codes are ready at the airport.",
            "How long does the Visit Japan Web registration take?",
        ),
    ],
    "japanese_cooking": [
        (
            "I want to make tonkotsu ramen broth at home. How long do the pork bones need to boil?",
            "Tonkotsu needs a hard rolling boil for 10 to 12 hours so the collagen emulsifies; blanch the bones first and top up the water as it reduces.",
            "Can I use a pressure cooker to speed it up?",
        ),
        (
            "My sushi rice always turns out mushy. What am I doing wrong?",
            "Rinse the short-grain rice until the water runs clear, use slightly less water than usual, and fold in the vinegar seasoning while the rice is hot, fanning it to cool.",
            "What ratio of rice vinegar, sugar and salt do you use?",
        ),
        (
            "How do I make dashi from scratch for miso soup?",
            "Soak kombu in cold water for 30 minutes, heat it to just below a simmer, remove it, then add katsuobushi flakes, steep for a few minutes and strain.",
            "Is white or red miso better for a weeknight soup?",
        ),
        (
            "My tempura batter comes out heavy and greasy. Any tricks?",
            "Use ice-cold sparkling water, mix the flour only briefly so lumps remain, and fry in small batches at 170 to 180 degrees so the oil temperature holds.",
            "Which vegetables work best for tempura?",
        ),
        (
            "Which Japanese knife should I buy first, a santoku or a gyuto?",
            "A 21 cm gyuto is the more versatile first knife; a santoku suits smaller hands and mostly vegetable prep. Either way learn to sharpen on a whetstone.",
            "What grit of whetstone should I start with?",
        ),
        (
            "Can you give me a recipe for chicken teriyaki like the restaurants make?",
            "Sear skin-on thighs until crisp, then glaze in a sauce of equal parts soy sauce, mirin and sake with a spoon of sugar, reducing it until it coats the chicken.",
            "Can I make the sauce ahead and keep it in the fridge?",
        ),
        (
            "How do I make gyoza wrappers and fold the dumplings properly?",
            "Mix flour with hot water into a firm dough, rest it, roll thin circles, then fill with pork and cabbage and pleat one side against the flat other side.",
            "Should I pan fry or steam them?",
        ),
        (
            "I'd like to cook okonomiyaki for friends. What goes into the batter?",
            "The batter is flour, dashi, eggs and grated nagaimo, folded with lots of shredded cabbage; top with pork belly, then okonomi sauce, mayonnaise and bonito flakes.",
            "Can I replace nagaimo with something easier to find?",
        ),
    ],
    "marathon": [
        (
            "I signed up for my first marathon in October. Can you build me a 16 week training plan?",
            "Start with four runs a week: two easy runs, one tempo run and a long run that grows from 10 to 32 kilometres, with a cutback week every fourth week.",
            "How fast should my easy runs be?",
        ),
        (
            "My long runs keep falling apart after 25 km. How should I fuel during them?",
            "Take 30 to 60 grams of carbohydrate per hour from the first 45 minutes, using gels or chews, and practise it on every long run so your stomach adapts.",
            "Do I need electrolytes too or just water?",
        ),
        (
            "Which running shoes are good for marathon training if I overpronate?",
            "Stability shoes such as the Brooks Adrenaline or Asics Kayano suit overpronation; rotate two pairs and replace them every 600 to 800 kilometres.",
            "Are carbon plated shoes worth it for race day?",
        ),
        (
            "I have shin splints three weeks before the race. Should I keep running?",
            "Cut the volume, swap some runs for cycling or pool running, ice after sessions and see a physio if the pain is in one spot, which can signal a stress fracture.",
            "How long before the race should I stop cross training?",
        ),
        (
            "How should I taper in the last three weeks before the marathon?",
            "Reduce weekly mileage by about 20, 40 and 60 percent over the three weeks while keeping some race pace work, and sleep and eat carbohydrates well.",
            "Is it normal to feel sluggish during the taper?",
        ),
        (
            "What pace should I aim for to finish the marathon under four hours?",
            "A sub-4 marathon needs about 5:40 per kilometre; start 5 to 10 seconds slower for the first 10 km and hold even effort through the hills.",
            "Should I run with the pace group?",
        ),
        (
            "Can you suggest some strength exercises for runners training for a marathon?",
            "Twice a week do single leg squats, Romanian deadlifts, calf raises, glute bridges and planks; keep it on easy days so it does not ruin the key runs.",
            "Should I lift before or after running?",
        ),
        (
            "What should I eat the night before and the morning of the marathon?",
            "Eat a familiar carb-heavy dinner like pasta or rice, and three hours before the start have toast, a banana and some honey with water.",
            "Is coffee on race morning a good idea?",
        ),
    ],
    "startup": [
        (
            "I'm starting a small business selling handmade candles. Do I need an LLC?",
            "An LLC separates your personal assets from business debts and is cheap to form in most states; a sole proprietorship is simpler but offers no protection.",
            "Which state should I register the company in?",
        ),
        (
            "Can you help me write a business plan for my bakery startup?",
            "A lean business plan covers the problem, customers, pricing, costs, a 12-month cash forecast and how you will reach your first hundred customers.",
            "How detailed should the financial projections be?",
        ),
        (
            "Running a business is stressful, how do I handle cash flow when clients pay late?",
            "Invoice immediately, ask for deposits, offer a small discount for early payment, and keep three months of fixed costs in reserve.",
            "Should I charge late fees to my clients?",
        ),
        (
            "I'm about to hire my first employee for the company. What paperwork do I need?",
            "You need an employer identification number, an I-9 and W-4 for the hire, state new-hire reporting, workers compensation insurance and a payroll provider.",
            "Is it easier to start with a contractor instead?",
        ),
        (
            "What should go into a pitch deck for seed investors?",
            "Ten to twelve slides: problem, solution, market size, traction, business model, competition, team, financials and the amount you are raising.",
            "How much equity do seed investors usually take?",
        ),
        (
            "How do I set prices for my consulting business without underselling myself?",
            "Work back from the income you need, your billable hours and overhead, then compare with market rates; value-based project pricing often beats hourly rates.",
            "How do I tell existing clients that my rates are going up?",
        ),
        (
            "What quarterly taxes does a self-employed business owner have to pay?",
            "You pay estimated income tax and self-employment tax four times a year using Form 1040-ES; setting aside 25 to 30 percent of profit is a safe habit.",
            "Can I deduct my home office?",
        ),
        (
            "How can I market my new online store on a small budget?",
            "Start with an email list, post product stories on Instagram, partner with micro influencers, and make sure product pages are optimised for search.",
            "Is paid advertising worth it this early?",
        ),
    ],
    "python_code": [
        (
            "How do I read a CSV file into a pandas DataFrame and skip the first two rows?",
            "Use pd.read_csv with skiprows=2, or pass header=2 if the header is on the third line; check the result with df.head().",
            "How do I parse one column as dates while reading it?",
        ),
        (
            "My Python script throws KeyError when I access a dictionary. How do I debug it?",
            "The key is missing: print the dictionary keys, use dict.get with a default, or catch KeyError; a defaultdict helps when you build counts.",
            "What's the difference between get and setdefault?",
        ),
        (
            "Can you explain list comprehensions in Python with an example?",
            "A list comprehension builds a list in one expression, for example squares = [x * x for x in numbers if x > 0], which is a loop with append written compactly.",
            "Are generator expressions faster than list comprehensions?",
        ),
        (
            "How do I set up a virtual environment for my Python project?",
            "Run python -m venv .venv, activate it, and install your dependencies with pip; record them in requirements.txt or a pyproject file so others can reproduce it.",
            "Should I use poetry or plain pip?",
        ),
        (
            "I'm confused by asyncio in Python. When should I use async and await?",
            "Use asyncio for programs that wait on many network or disk operations at once; an async function must be awaited, and CPU-heavy work still blocks the event loop.",
            "How do I run several requests concurrently with aiohttp?",
        ),
        (
            "How do I write unit tests for my Python functions with pytest?",
            "Put functions named test_something in a tests folder, use plain assert statements, and run pytest; fixtures share setup between tests.",
            "How do I mock an HTTP call in a pytest test?",
        ),
        (
            "My Python code for processing a large file is slow. How can I profile it?",
            "Run it under cProfile and sort by cumulative time, or use line_profiler on the hot function; often reading line by line and avoiding repeated string concatenation helps.",
            "Would multiprocessing speed it up?",
        ),
        (
            "What are type hints in Python and should I use mypy?",
            "Type hints annotate the expected types of arguments and return values; mypy checks them without running the code and catches many bugs early.",
            "How do I type a function that accepts either a string or a list?",
        ),
    ],
    "pet_python": [
        (
            "I just got a ball python. What temperature should the enclosure be?",
            "Keep a warm side of 31 to 33 degrees and a cool side around 26, with a thermostat on every heat source and a hide on each side.",
            "Is a heat mat or a ceramic heater better for the ball python?",
        ),
        (
            "My pet python hasn't eaten in three weeks. Should I worry?",
            "Ball pythons often fast in winter or before a shed; check the weight every week and temperatures, and see a reptile vet if it keeps losing weight.",
            "Should I try feeding a live mouse instead of frozen?",
        ),
        (
            "What humidity does a ball python need, and how do I keep it up?",
            "Aim for 55 to 65 percent humidity; use a substrate like cypress mulch, a large water bowl and a humid hide, and mist when it is about to shed.",
            "Its last shed came off in pieces, is that the humidity?",
        ),
        (
            "How big a tank does an adult ball python need?",
            "An adult needs at least a 120 by 60 by 60 centimetre enclosure with secure locks, since snakes are escape artists.",
            "Is a glass tank or a PVC enclosure better?",
        ),
        (
            "How often should I feed my young python and what size prey?",
            "Feed a juvenile every 7 to 10 days with a thawed rodent about as wide as the thickest part of its body, moving to every two weeks as an adult.",
            "Is it safe to handle the snake right after feeding?",
        ),
        (
            "My snake keeps rubbing its nose on the glass. Is my python stressed?",
            "Nose rubbing usually means it is exploring or wants more space or hides; check temperatures and add clutter so it feels secure.",
            "Could it be mites?",
        ),
        (
            "How do I handle a ball python that is nervous and balls up?",
            "Pick it up gently from underneath, support its body, keep sessions short and avoid handling for two days after a meal or during shed.",
            "How long until it gets used to me?",
        ),
        (
            "Do ball pythons need UVB lighting in their vivarium?",
            "They can live without it, but low level UVB on a day and night cycle is beneficial as long as there are shaded areas to retreat to.",
            "How many hours of light a day?",
        ),
    ],
    "garden": [
        (
            "I want to start a vegetable garden in raised beds this spring. What soil mix should I use?",
            "Fill raised beds with about 60 percent topsoil, 30 percent compost and 10 percent potting mix or perlite for drainage.",
            "How deep should the raised beds be?",
        ),
        (
            "My tomato plants have yellow leaves at the bottom. What's wrong?",
            "Lower leaf yellowing is often early blight or a nitrogen shortage; remove the affected leaves, mulch to stop soil splashing, and water at the base.",
            "Should I spray a fungicide on the tomatoes?",
        ),
        (
            "How do I start a compost pile for my garden?",
            "Mix green material like kitchen scraps and grass clippings with brown material like dry leaves at roughly one to three, keep it moist and turn it every week or two.",
            "Can I put citrus peels in the compost?",
        ),
        (
            "How often should I water my vegetable beds in hot weather?",
            "Water deeply two or three times a week in the morning rather than a little every day, aiming for about 2.5 cm of water a week; drip lines help.",
            "Is mulch worth it to keep the soil moist?",
        ),
        (
            "Aphids are all over my peppers and beans. How do I get rid of them naturally?",
            "Spray them off with water, use insecticidal soap, and attract ladybirds and lacewings with flowers like dill and alyssum.",
            "Is neem oil safe on vegetables I'm going to eat?",
        ),
        (
            "Which vegetables can I plant in the garden in late summer for a fall harvest?",
            "Sow kale, spinach, lettuce, radishes, carrots and garlic in late summer; they handle light frost and often taste sweeter after it.",
            "Do I need row covers for the kale?",
        ),
        (
            "When should I start tomato and pepper seeds indoors?",
            "Start them six to eight weeks before your last frost date under a grow light, then harden the seedlings off for a week before planting out.",
            "How close to the seedlings should the grow light be?",
        ),
        (
            "What flowers should I plant near my vegetables to attract pollinators?",
            "Borage, marigold, calendula, zinnia and lavender bring bees and hoverflies, and marigolds may also deter some soil pests.",
            "Will the marigolds compete with the squash?",
        ),
    ],
    "wedding": [
        (
            "We're getting married next June. How far ahead should we book the wedding venue?",
            "Popular venues book 12 to 18 months ahead for June weekends; a Friday or Sunday date opens more options and often costs less.",
            "What questions should we ask on a venue tour?",
        ),
        (
            "How do we keep our wedding guest list under 100 people?",
            "Set clear rules together, like no plus-ones for guests who are not in relationships and no coworkers, and split the list between families evenly.",
            "Is it rude to have an adults-only reception?",
        ),
        (
            "Can you help me write my wedding vows? I want something personal but short.",
            "Open with how you met, name one thing you love about your partner, make three promises, and finish with a line about your future together, under two minutes.",
            "Should the vows be funny or serious?",
        ),
        (
            "What's the etiquette for wedding invitations, when should they be sent?",
            "Send save-the-dates six to eight months before and invitations six to eight weeks before the wedding, with the RSVP deadline a month before.",
            "How do we word that the reception is adults only?",
        ),
        (
            "How should we choose a caterer for the reception?",
            "Ask for a tasting, compare per-head prices including service and rentals, check how they handle dietary needs, and read reviews from recent weddings.",
            "Buffet or plated dinner for 90 guests?",
        ),
        (
            "What should a wedding day timeline look like for a 4pm ceremony?",
            "Hair and makeup from 10, photos of the couple at 2, ceremony at 4, cocktail hour at 4:30, dinner at 5:30, first dance at 7 and send-off at 10.",
            "When should we do the family photos?",
        ),
        (
            "Do we need a wedding planner or just a day-of coordinator?",
            "If you have time and enjoy organising, a day-of coordinator is enough; a full planner is worth it when you both work long hours or marry far from home.",
            "How much does a day-of coordinator usually cost?",
        ),
        (
            "I'm shopping for a wedding dress. When should I order it?",
            "Order it eight to ten months before the wedding since production takes four to six months and alterations need another two.",
            "How many fittings should I plan for the dress?",
        ),
    ],
}

HALF_B: dict[str, list[Session]] = {
    "italy_trip": [
        (
            "We're visiting Italy for ten days in September. Should we fly into Rome or Milan?",
            "Fly into Rome and out of Milan or Venice to avoid backtracking; open-jaw tickets usually cost about the same as a return.",
            "How many days should we spend in Rome?",
        ),
        (
            "How do I get from Rome to Florence by train, and should I book ahead?",
            "Frecciarossa and Italo high speed trains take about 1 hour 35 minutes; booking a few weeks ahead gets much cheaper fares than at the station.",
            "Do I need to validate the ticket before boarding?",
        ),
        (
            "Do we need to book Vatican Museums and Uffizi Gallery tickets in advance?",
            "Yes, book both online weeks ahead for a timed entry, and go early in the morning or on a Friday evening when the Vatican opens late.",
            "Is a guided tour of the Sistine Chapel worth it?",
        ),
        (
            "Is renting a car in Tuscany a good idea for a few days of our Italy holiday?",
            "A car is the easiest way to see Tuscan hill towns and wineries, but avoid driving into the ZTL zones of city centres, which are camera enforced.",
            "Do I need an international driving permit in Italy?",
        ),
        (
            "Where should we stay on the Amalfi Coast, Positano or Sorrento?",
            "Positano is beautiful but steep and pricey; Sorrento is cheaper, flatter and has ferries and trains, making it a better base for Pompeii and Capri.",
            "How do we get from Naples to Sorrento?",
        ),
        (
            "What's a good daily budget for two in Italy, including food and hotels?",
            "Plan on 200 to 300 euros a day for two with three-star hotels, lunches at trattorias and some museum tickets; Venice and the Amalfi Coast cost more.",
            "Is tipping expected in Italian restaurants?",
        ),
        (
            "Can you plan a two day itinerary for Venice on our trip?",
            "Day one St Mark's Basilica, the Doge's Palace and a walk to Rialto; day two the islands of Murano and Burano, then an evening in Cannaregio.",
            "Should we buy a vaporetto pass?",
        ),
        (
            "What should I pack for Italy in September? We'll visit churches too.",
            "Pack light layers for 20 to 28 degrees, good walking shoes, and a scarf or clothes covering shoulders and knees, which churches require.",
            "Will I need an umbrella in September?",
        ),
    ],
    "italian_language": [
        (
            "I'm learning Italian. Can you explain when to use the passato prossimo?",
            "The passato prossimo describes finished actions, formed with avere or essere plus the past participle, as in ho mangiato or sono andato.",
            "How do I know whether a verb takes essere or avere?",
        ),
        (
            "What's the difference between the imperfetto and the passato prossimo in Italian?",
            "The imperfetto describes ongoing or habitual past states, like da bambino giocavo, while the passato prossimo marks completed events.",
            "Can you give me a short exercise to practise both?",
        ),
        (
            "How can I improve my Italian pronunciation, especially the rolled r?",
            "Practise the tapped r with words like caro and the trilled rr with carro, and shadow native speakers from podcasts, copying their rhythm.",
            "Are there Italian podcasts for intermediate learners?",
        ),
        (
            "Is Duolingo enough to learn Italian or should I take lessons?",
            "Apps build vocabulary, but to speak you need conversation practice; add a weekly tutor on italki and read graded readers.",
            "How many hours a week should I study Italian?",
        ),
        (
            "Can you explain Italian articles? I keep mixing up il, lo and la.",
            "Il goes before most masculine nouns, lo before masculine nouns starting with s plus consonant, z or gn, and la before feminine nouns; l' before vowels.",
            "What are the plural forms of those articles?",
        ),
        (
            "How do I use the congiuntivo in Italian? It's really confusing.",
            "The subjunctive follows verbs of opinion, doubt, wish and emotion, as in penso che sia vero, and some conjunctions like benché and affinché.",
            "Do Italians still use the congiuntivo when they speak?",
        ),
        (
            "Can you recommend Italian books or TV shows for a B1 learner?",
            "Try Montalbano and L'amica geniale on TV, and the graded readers of Alma Edizioni or Italian short stories for beginners.",
            "Should I watch with Italian subtitles?",
        ),
        (
            "What are the most useful Italian phrases for small talk?",
            "Come va, di dove sei, che lavoro fai, mi piace molto and non vedo l'ora are everyday phrases that carry a conversation.",
            "How do I politely say I didn't understand in Italian?",
        ),
    ],
    "renovation": [
        (
            "We're remodeling our kitchen. Should we choose quartz or granite countertops?",
            "Quartz needs no sealing and resists stains; granite handles heat better and each slab is unique. Both cost roughly the same installed.",
            "Which edge profile is easiest to clean?",
        ),
        (
            "How do I pick a good contractor for the kitchen remodel?",
            "Get three written bids, check their licence and insurance, call recent references, and never pay more than a third up front.",
            "What should the contract say about delays?",
        ),
        (
            "Do I need a permit to move a wall during our renovation?",
            "Removing or moving a wall needs a building permit, and if it is load bearing you need an engineer's plan and a beam sized for the load.",
            "How can I tell if a wall is load bearing?",
        ),
        (
            "What's a realistic budget for a mid-range kitchen renovation?",
            "A mid-range kitchen remodel typically runs 25,000 to 60,000 dollars, with cabinets taking about a third; keep 15 percent for surprises behind the walls.",
            "Where can we save money without it looking cheap?",
        ),
        (
            "Should we go with shaker cabinets or flat-panel ones for the new kitchen?",
            "Shaker cabinets are timeless and hide wear well; flat-panel slab doors look modern and are easy to clean but show fingerprints on glossy finishes.",
            "What about painted versus wood stained cabinets?",
        ),
        (
            "What flooring holds up best in a kitchen renovation, tile or vinyl plank?",
            "Porcelain tile lasts decades and resists water; luxury vinyl plank is warmer, quieter and cheaper, and also waterproof.",
            "Can vinyl plank go over the old tile?",
        ),
        (
            "How long does a full kitchen remodel usually take?",
            "Expect six to twelve weeks of construction after design and ordering, with cabinets and countertops often the longest lead items.",
            "How do we cook while the kitchen is torn out?",
        ),
        (
            "What lighting should we plan for the remodeled kitchen?",
            "Layer recessed ceiling lights, under-cabinet LED strips for work surfaces, and pendants over the island, each on its own dimmer.",
            "What colour temperature looks best in a kitchen?",
        ),
    ],
    "sourdough": [
        (
            "I'm trying to bake sourdough bread in my kitchen. How do I make a starter?",
            "Mix equal weights of whole wheat flour and water, then discard half and feed it daily; after one to two weeks it should double within six hours.",
            "My starter smells like nail polish, is that bad?",
        ),
        (
            "My sourdough loaf is dense and flat. What am I doing wrong?",
            "Usually the bulk fermentation was too short or the starter was weak; let the dough rise until it grows about 50 percent and feels airy.",
            "How do I know when bulk fermentation is done?",
        ),
        (
            "What hydration should I use for an open crumb sourdough?",
            "Start at 70 to 75 percent hydration with strong bread flour, and build strength with coil folds during the first two hours.",
            "How many sets of folds should I do?",
        ),
        (
            "How do I get a good ear and crust when baking sourdough?",
            "Bake in a preheated Dutch oven at 250 degrees with the lid on for 20 minutes, score at a shallow 30 degree angle, then bake uncovered until deep brown.",
            "Can I bake sourdough without a Dutch oven?",
        ),
        (
            "Can I retard sourdough dough in the fridge overnight?",
            "Yes, a cold proof of 8 to 16 hours after shaping improves flavour and makes scoring easier; bake it straight from the fridge.",
            "Does the cold proof make the bread more sour?",
        ),
        (
            "How do I make sourdough discard pancakes?",
            "Whisk a cup of discard with an egg, a spoon of sugar, a little milk, melted butter and half a teaspoon of baking soda, and cook on a hot griddle.",
            "Can I keep discard in the fridge for a week?",
        ),
        (
            "What flour is best for sourdough bread?",
            "A strong bread flour with 12 to 13 percent protein gives structure; adding 10 to 20 percent whole wheat or rye boosts flavour and fermentation.",
            "Can I use all-purpose flour instead?",
        ),
        (
            "My sourdough crumb is gummy even after cooling. Why?",
            "Gummy crumb means underbaking or cutting too soon; bake until the inside reaches about 96 degrees and wait at least two hours before slicing.",
            "Does a wetter dough make it gummier?",
        ),
    ],
    "finance": [
        (
            "How do I make a monthly budget? I never know where my money goes.",
            "Track every expense for a month, then use the 50/30/20 rule: half to needs, 30 percent to wants and 20 percent to savings and debt repayment.",
            "Which budgeting app do you recommend?",
        ),
        (
            "How big should my emergency fund be?",
            "Three to six months of essential expenses in a high-yield savings account; aim for six months if your income is irregular.",
            "Should I pay off my credit card before building the emergency fund?",
        ),
        (
            "Should I invest in index funds or pick individual stocks for retirement?",
            "Low-cost broad index funds beat most stock pickers over time; a total market fund plus an international fund is a simple, diversified base.",
            "What expense ratio is considered low?",
        ),
        (
            "My employer offers a 401k match. How much should I contribute?",
            "Contribute at least enough to get the full employer match, since it is an instant return, then consider a Roth IRA before adding more to the 401k.",
            "What's the difference between a Roth IRA and a traditional IRA?",
        ),
        (
            "What's the best way to pay off 12,000 dollars of credit card debt?",
            "List the debts and pay the highest interest rate first while paying minimums on the rest, or consider a 0 percent balance transfer card.",
            "Would a personal loan to consolidate the debt help?",
        ),
        (
            "How much should I be saving for retirement at 35?",
            "A common benchmark is to have about twice your salary saved by 35 and to save 15 percent of gross income each year, including any match.",
            "Is it too late to catch up if I'm behind?",
        ),
        (
            "How does compound interest work on my savings?",
            "Interest is earned on the interest already added, so 10,000 dollars at 5 percent grows to about 16,300 in ten years without new deposits.",
            "How often is interest compounded in a savings account?",
        ),
        (
            "Should I rebalance my investment portfolio every year?",
            "Rebalancing once a year or when an allocation drifts more than 5 percentage points keeps your risk where you chose it.",
            "Are there tax consequences when I rebalance?",
        ),
    ],
    "car_buying": [
        (
            "I'm looking for a used car under 15,000 dollars. What should I check before buying?",
            "Get a vehicle history report, have an independent mechanic inspect it, check tyres, brakes and fluids, and test drive it on the highway.",
            "Which models are the most reliable in that price range?",
        ),
        (
            "Should my next car be electric or a hybrid? I drive about 50 km a day.",
            "At 50 km a day an electric car covers your commute easily if you can charge at home; a hybrid suits you better if you often take long trips.",
            "How much does installing a home charger cost?",
        ),
        (
            "Is it better to finance a car through the dealer or my bank?",
            "Get pre-approved for an auto loan at your bank or credit union first, then let the dealer try to beat that rate; compare the total cost, not the monthly payment.",
            "What loan term should I choose for the car?",
        ),
        (
            "How do I negotiate the price of a new car at the dealership?",
            "Research the invoice price, get quotes from several dealers by email, negotiate the out-the-door price, and handle the trade-in separately.",
            "When is the best time of year to buy a car?",
        ),
        (
            "Should I lease or buy my next car?",
            "Leasing gives lower payments and a new car every few years but limits mileage; buying costs more up front and is cheaper if you keep the car long.",
            "What happens if I go over the lease mileage?",
        ),
        (
            "How do I get the most for my trade-in when buying a new car?",
            "Get offers from CarMax and online buyers first, clean the car, bring service records, and do not reveal the trade-in until the new car price is agreed.",
            "Is it better to sell the old car privately?",
        ),
        (
            "Which family SUV has the best safety ratings for a car under 40,000?",
            "The Mazda CX-50, Honda CR-V, Toyota RAV4 and Subaru Forester all earn top safety ratings with standard driver assistance.",
            "Which of those has the most cargo space?",
        ),
        (
            "What should I ask on a test drive of a car I'm considering?",
            "Drive it on roads you use daily, test visibility and seat comfort, try the infotainment, check noise at highway speed, and ask about warranty coverage.",
            "Should I bring my own mechanic to the test drive?",
        ),
    ],
    "guitar": [
        (
            "I just bought my first acoustic guitar. Which chords should I learn first?",
            "Start with G, C, D, E minor and A minor; with those five chords you can play hundreds of songs.",
            "My fingertips hurt, is that normal?",
        ),
        (
            "How do I switch between guitar chords faster?",
            "Practise one chord change at a time for a minute, counting how many clean switches you make, and keep fingers that stay on the same string anchored.",
            "Should I use a metronome for chord changes?",
        ),
        (
            "Can you explain basic strumming patterns for guitar?",
            "The classic down, down-up, up-down-up pattern fits most pop songs; keep your arm moving steadily and just miss the strings on silent strokes.",
            "How do I strum with a pick without it slipping?",
        ),
        (
            "How long should I practise guitar every day as a beginner?",
            "Twenty to thirty focused minutes a day beats a long weekend session: warm up, work on one technique, then play a song you enjoy.",
            "Should I learn to read tabs or sheet music?",
        ),
        (
            "I keep struggling with the F barre chord on guitar. Any tips?",
            "Roll your index finger slightly onto its bony side, keep the thumb behind the neck, and start with a small four-string version of F before the full barre.",
            "Would lighter strings make barre chords easier?",
        ),
        (
            "How do I tune my guitar without a tuner?",
            "Tune the low E to a reference, then fret the fifth fret of each string to match the next open string, except the fourth fret on the G string.",
            "Are tuner apps accurate enough?",
        ),
        (
            "What are some easy songs to learn on acoustic guitar?",
            "Try Horse with No Name, Knockin' on Heaven's Door, Wonderwall and Riptide; they use open chords and simple strumming.",
            "Can you write out the chords for Riptide?",
        ),
        (
            "How do I start fingerpicking on guitar?",
            "Assign your thumb to the bass strings and index, middle and ring fingers to the G, B and E strings, then practise a simple Travis picking pattern slowly.",
            "Should I grow my nails for fingerpicking?",
        ),
    ],
}

# A user's one-off requests: one session each, about nothing else in the set.
ONE_OFFS_A: list[Session] = [
    (
        "Can you write a short birthday message for my grandmother who is turning 90?",
        "Happy 90th birthday, Grandma! Your kindness and stories have shaped our family, and we are so lucky to celebrate you today.",
        "Make it a little funnier please.",
    ),
    (
        "How many tablespoons are in a cup?",
        "There are 16 tablespoons in a US cup, and 3 teaspoons in each tablespoon.",
        "And how many millilitres is that?",
    ),
    (
        "Explain how a blockchain works in simple terms.",
        "A blockchain is a shared ledger copied across many computers; each block of transactions links to the previous one with a hash, so changing history is very hard.",
        "Why does it use so much energy?",
    ),
    (
        "What's the difference between a cold and the flu?",
        "Flu comes on suddenly with fever, body aches and exhaustion, while a cold builds gradually with a runny nose and sore throat and is usually milder.",
        "When should I see a doctor?",
    ),
    (
        "Can you summarise the plot of Pride and Prejudice?",
        "Elizabeth Bennet clashes with the proud Mr Darcy, misjudges him after Wickham's lies, and slowly realises her prejudice as Darcy proves his character.",
        "Which film adaptation is the best?",
    ),
    (
        "Help me write a polite email asking my landlord to fix the heating.",
        "Dear Mr Lee, the heating in my flat has not worked since Monday; could you arrange a repair this week? Thank you for your help.",
        "Can you make it firmer? It's the second time.",
    ),
    (
        "Why is the sky blue?",
        "Sunlight scatters off air molecules, and shorter blue wavelengths scatter much more than red ones, so blue light reaches our eyes from every direction.",
        "Then why are sunsets red?",
    ),
    (
        "What's a good name for a golden retriever puppy?",
        "Popular choices are Maple, Sunny, Biscuit, Honey, Cooper and Murphy.",
        "Something a bit more unusual?",
    ),
    (
        "How do I remove a red wine stain from a carpet?",
        "Blot it, pour cold water on it, then apply a paste of baking soda and water or a mix of dish soap and hydrogen peroxide, and blot again.",
        "Will salt work too?",
    ),
    (
        "Recommend a few podcasts about history.",
        "Try Hardcore History, The Rest Is History, Revolutions and You're Dead to Me.",
        "Which one is best for short episodes?",
    ),
    (
        "How do I convert Celsius to Fahrenheit in my head?",
        "Double the Celsius value and add 30 for a rough figure; the exact formula multiplies by 1.8 and adds 32.",
        "What's 37 degrees then?",
    ),
    (
        "Can you suggest a board game for six adults?",
        "Codenames, Wavelength, Cascadia and Ticket to Ride all work well for six players and are easy to teach.",
        "Which one is the quickest?",
    ),
]

ONE_OFFS_B: list[Session] = [
    (
        "Write a thank you note to my neighbour who watered my plants.",
        "Thank you so much for looking after my plants while I was away; they look happier than when I left!",
        "Add something about bringing her cookies.",
    ),
    (
        "How long should I boil an egg for a runny yolk?",
        "Lower the egg into boiling water and cook it for six minutes, then cool it in ice water for a minute.",
        "And for a hard boiled egg?",
    ),
    (
        "Explain photosynthesis like I'm ten.",
        "Plants catch sunlight with their green leaves and use it to turn water and carbon dioxide from the air into sugar for food, giving off oxygen.",
        "Why are leaves green?",
    ),
    (
        "What time zone is Sydney in compared to London?",
        "Sydney is 9 to 11 hours ahead of London depending on daylight saving time in each city.",
        "So if it's noon in London what time is it there?",
    ),
    (
        "Can you recommend a mystery novel for a long flight?",
        "The Thursday Murder Club, Big Little Lies and Gone Girl are gripping and easy to read on a plane.",
        "Something more classic?",
    ),
    (
        "How do I unclog a bathroom sink without chemicals?",
        "Remove and clean the pop-up stopper, then pour baking soda and vinegar down the drain, wait 15 minutes and flush with hot water, or use a plunger.",
        "What if that doesn't work?",
    ),
    (
        "What does a black hole actually do?",
        "A black hole is matter squeezed so densely that its gravity stops even light escaping past the event horizon; nearby gas heats up and glows as it falls in.",
        "Could the Earth fall into one?",
    ),
    (
        "Give me ideas for a ten year old's birthday party.",
        "A backyard treasure hunt, a movie night with popcorn, a science slime workshop or a camping sleepover in the living room.",
        "Which one works for twelve kids?",
    ),
    (
        "How do I write a haiku?",
        "A haiku has three lines of five, seven and five syllables, usually capturing a moment in nature with a seasonal word.",
        "Write one about autumn rain.",
    ),
    (
        "Is it safe to leave my phone charging overnight?",
        "Modern phones stop charging at full and manage the battery, so it is safe; keep it off the bed so it can cool.",
        "Does fast charging hurt the battery?",
    ),
    (
        "How do I politely decline a meeting invitation at work?",
        "Thank them, say you cannot attend because of a prior commitment, and offer an alternative like reading the notes or sending input by email.",
        "Make it shorter.",
    ),
    (
        "What's the capital of Australia and why isn't it Sydney?",
        "Canberra is the capital; it was built as a compromise between rivals Sydney and Melbourne after federation in 1901.",
        "When was Canberra founded?",
    ),
]

# Near-miss partners: the theme that shares vocabulary with a theme but is another subject.
NEAR_MISS: dict[str, str] = {
    "japan_trip": "japanese_cooking",
    "japanese_cooking": "japan_trip",
    "marathon": "startup",
    "startup": "marathon",
    "python_code": "pet_python",
    "pet_python": "python_code",
    "italy_trip": "italian_language",
    "italian_language": "italy_trip",
    "renovation": "sourdough",
    "sourdough": "renovation",
    "finance": "car_buying",
    "car_buying": "finance",
}

# What assistants and users say around the substance.
GREETINGS = ["hi", "hey there", "hello!", "hi, quick question", "good morning"]
OPENERS = [
    "Happy to help!",
    "Great question!",
    "Sure thing!",
    "Absolutely, happy to help with that.",
    "Of course!",
    "Happy to help with that.",
    "Good question, let me help.",
]
REPLIES_TO_GREETING = [
    "Hello! How can I help you today?",
    "Hi! What can I do for you?",
    "Hey! Happy to help. What's on your mind?",
]
FOLLOW_UP_ANSWERS = [
    "Good question! It depends on your situation, but in most cases yes, that works well.",
    "Great question. Usually it does, though it's worth checking the details for your case.",
    "That's a common question! Generally it's fine, just keep an eye on it.",
    "Happy to clarify! Most people find that works, and you can adjust as you go.",
]
THANKS = ["thanks!", "thank you, that helps", "great, thanks so much", "ok cool, thanks", "perfect, thank you!"]
CLOSERS = [
    "You're welcome! Anything else I can help you with?",
    "Happy to help! Let me know if you have any other questions.",
    "Glad I could help! Anything else?",
    "You're very welcome! Hope this helps, and feel free to ask anything else.",
    "No problem at all! Is there anything else you'd like to know?",
]
