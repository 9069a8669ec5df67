"""Product types of the synthetic WebShop catalogue: category paths, queries, attributes, option groups, prices.

Hand-written to resemble the benchmark's five categories (beauty, electronics, fashion, garden, grocery); values
are lowercase like the benchmark's processed options and never repeat across the groups of one type.
"""

from __future__ import annotations

COLORS_BASIC = ["black", "white", "grey", "navy blue", "red", "pink", "beige", "brown", "green", "purple",
                "teal", "khaki", "burgundy", "light blue", "olive", "rose gold", "silver", "gold", "multicolor"]
APPAREL_SIZES = ["x-small", "small", "medium", "large", "x-large", "xx-large", "3x-large"]
SHOE_SIZES = ["5", "5.5", "6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "11", "12"]
PACKS = ["pack of 1", "pack of 2", "pack of 3", "pack of 4", "pack of 6", "pack of 12"]

# option group (display name) -> value pool; a product takes a contiguous-ish subset of each of its groups
OPTION_POOLS: dict[str, list[str]] = {
    "Color": COLORS_BASIC,
    "Size": APPAREL_SIZES,
    "ShoeSize": SHOE_SIZES,
    "Pack": PACKS,
    "Volume": ["1 fl oz", "2 fl oz", "3.4 fl oz", "6.8 fl oz", "8 fl oz", "16 fl oz"],
    "Length": ["12 inch", "14 inch", "16 inch", "18 inch", "20 inch", "24 inch"],
    "BandSize": ["38 | 40 | 41 mm", "42 | 44 | 45 mm", "49 mm"],
    "Config": ["8gb ram | 256gb ssd", "16gb ram | 512gb ssd", "16gb ram | 1tb ssd", "32gb ram | 1tb ssd"],
    "Phone": ["iphone 13", "iphone 13 pro", "iphone 14", "iphone 14 pro max", "galaxy s22", "pixel 7"],
    "Cameras": ["1 camera", "2 cameras", "3 cameras", "4 cameras"],
    "CableLength": ["3 ft", "6 ft", "10 ft", "3 ft + 6 ft"],
    "Waist": ["30w x 30l", "32w x 30l", "32w x 32l", "34w x 32l", "36w x 32l", "38w x 34l"],
    "Throw": ["50 x 60 inch", "60 x 80 inch", "90 x 90 inch", "108 x 90 inch"],
    "Rug": ["2 ft x 3 ft", "4 ft x 6 ft", "5 ft x 7 ft", "8 ft x 10 ft", "9 ft x 12 ft"],
    "Canvas": ["12x16 inch", "16x24 inch", "24x36 inch", "30x40 inch"],
    "Flavor": ["original", "vanilla", "chocolate", "strawberry", "peanut butter", "sea salt", "cinnamon",
               "honey", "mixed berry", "caramel"],
    "FoodSize": ["6 ounce", "8 ounce", "12 ounce", "16 ounce", "24 ounce", "32 ounce"],
    "Count": ["20 count", "24 count", "40 count", "48 count", "100 count"],
}

# the name each pool is published under in a raw item's customization_options
OPTION_NAMES = {"Color": "Color", "Size": "Size", "ShoeSize": "Size", "Pack": "Size", "Volume": "Size",
                "Length": "Size", "BandSize": "Size", "Config": "Style", "Phone": "Style", "Cameras": "Style",
                "CableLength": "Size", "Waist": "Size", "Throw": "Size", "Rug": "Size", "Canvas": "Size",
                "Flavor": "Flavor Name", "FoodSize": "Size", "Count": "Size"}


def _t(category, path, query, noun, attrs, options, price):
    return {"category": category, "product_category": path, "query": query, "noun": noun,
            "attributes": attrs.split(", "), "options": options, "price": price}


PRODUCT_TYPES = [
    _t("beauty", "Beauty & Personal Care › Tools & Accessories › Bags & Cases › Refillable Containers",
       "refillable containers", "Travel Bottles",
       "leak proof, bpa free, easy carry, travel size, easy clean, high quality, fine mist, travel bottles",
       ["Color", "Volume"], (4, 30)),
    _t("beauty", "Beauty & Personal Care › Hair Care › Hair Loss Products", "hair loss products",
       "Hair Growth Serum", "hair growth, natural ingredients, sulfate free, paraben free, hair loss, dry hair, "
       "cruelty free, tea tree", ["Volume", "Pack"], (9, 60)),
    _t("beauty", "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers", "face care",
       "Face Moisturizer Cream", "hyaluronic acid, dry skin, sensitive skin, anti aging, fragrance free, "
       "cruelty free, green tea, natural ingredients", ["Volume"], (8, 70)),
    _t("beauty", "Beauty & Personal Care › Makeup › Eyes › Eyeshadow", "makeup palettes", "Eyeshadow Palette",
       "long lasting, highly pigmented, easy apply, cruelty free, travel size, high quality, easy use",
       ["Color"], (6, 45)),
    _t("beauty", "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
       "nail polish", "Gel Nail Polish", "long lasting, non toxic, quick dry, nail art, easy apply, high quality",
       ["Color", "Pack"], (5, 25)),
    _t("beauty", "Beauty & Personal Care › Hair Care › Hair Extensions, Wigs & Accessories › Wigs", "wigs",
       "Synthetic Wig", "synthetic hair, natural looking, heat resistant, high quality, easy wear, hair extensions",
       ["Color", "Length"], (15, 180)),
    _t("electronics", "Electronics › Headphones › Earbud Headphones", "headphones", "Wireless Earbuds",
       "noise cancelling, stereo sound, long battery life, water resistant, hands free, fast charging, "
       "high fidelity", ["Color"], (12, 150)),
    _t("electronics", "Electronics › Wearable Technology › Arm & Wristband Accessories", "wearable technology",
       "Watch Band", "stainless steel, quick release, easy install, soft silicone, adjustable strap",
       ["Color", "BandSize"], (6, 40)),
    _t("electronics", "Electronics › Computers & Accessories › Computers & Tablets › Laptops", "laptops",
       "Laptop Computer", "intel core, high speed, full hd, quad core, backlit keyboard, long battery life",
       ["Config"], (280, 1400)),
    _t("electronics", "Cell Phones & Accessories › Accessories › Screen Protectors", "screen protectors",
       "Screen Protector", "tempered glass, easy install, high definition, case friendly, bubble free",
       ["Phone", "Pack"], (5, 20)),
    _t("electronics", "Electronics › Home Audio › Speakers", "home audio speakers", "Bluetooth Speaker",
       "home theater, high power, remote control, stereo sound, easy setup, long battery life",
       ["Color"], (25, 400)),
    _t("electronics", "Electronics › Camera & Photo › Video Surveillance › Surveillance Cameras",
       "security cameras", "Security Camera", "night vision, motion detection, easy install, two way audio, "
       "high definition, weather resistant", ["Cameras"], (25, 220)),
    _t("electronics", "Electronics › Computers & Accessories › Cables & Accessories › Cables", "usb cables",
       "USB C Cable", "fast charging, high speed, braided nylon, type c, durable design",
       ["Color", "CableLength"], (5, 25)),
    _t("fashion", "Clothing, Shoes & Jewelry › Women › Shoes › Loafers & Slip-Ons", "women's loafers & slip-ons",
       "Slip On Loafers", "rubber sole, arch support, memory foam, non slip, teen girls, comfortable fit",
       ["Color", "ShoeSize"], (18, 90)),
    _t("fashion", "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts", "men's t-shirts", "T-Shirt",
       "machine wash, classic fit, short sleeve, cotton heather, officially licensed, needle sleeve",
       ["Color", "Size"], (9, 35)),
    _t("fashion", "Clothing, Shoes & Jewelry › Women › Clothing › Active › Leggings", "women's activewear",
       "Yoga Leggings", "high waist, moisture wicking, quick drying, tummy control, polyester spandex, "
       "four way stretch", ["Color", "Size"], (12, 45)),
    _t("fashion", "Clothing, Shoes & Jewelry › Men › Clothing › Pants", "men's pants", "Chino Pants",
       "slim fit, straight leg, elastic waist, machine wash, relaxed fit, everyday wear",
       ["Color", "Waist"], (18, 70)),
    _t("fashion", "Clothing, Shoes & Jewelry › Women › Clothing › Dresses", "women's dresses", "Maxi Dress",
       "short sleeve, v neck, hand wash, polyester spandex, daily wear, unique design", ["Color", "Size"],
       (15, 60)),
    _t("fashion", "Clothing, Shoes & Jewelry › Men › Clothing › Fashion Hoodies & Sweatshirts",
       "men's fashion hoodies & sweatshirts", "Pullover Hoodie", "long sleeve, fleece lined, machine wash, "
       "drawstring closure, classic fit", ["Color", "Size"], (16, 55)),
    _t("garden", "Home & Kitchen › Furniture › Living Room Furniture › Sofas & Couches", "sofas and couches",
       "Sofa Couch", "living room, wood frame, easy assemble, solid wood, mid century, small space",
       ["Color"], (150, 900)),
    _t("garden", "Home & Kitchen › Furniture › Bedroom Furniture › Nightstands", "nightstands", "Nightstand",
       "storage space, easy install, white item, living room, solid wood, easy assemble", ["Color"], (35, 200)),
    _t("garden", "Home & Kitchen › Bedding › Blankets & Throws › Throws", "throw blankets", "Throw Blanket",
       "super soft, machine washable, fleece throw, living room, lightweight warm", ["Color", "Throw"], (15, 70)),
    _t("garden", "Home & Kitchen › Home Décor Products › Area Rugs", "area rugs", "Area Rug",
       "easy clean, non slip, living room, machine washable, high density, spot clean", ["Color", "Rug"],
       (25, 300)),
    _t("garden", "Home & Kitchen › Wall Art › Posters & Prints", "wall art", "Canvas Wall Art",
       "ready hang, living room, home decor, wood frame, high definition", ["Canvas"], (15, 120)),
    _t("garden", "Tools & Home Improvement › Lighting & Ceiling Fans › Ceiling Lights › Pendant Lights",
       "kitchen islands", "Pendant Light", "glass shade, easy install, living room, dining room, "
       "pendant light, light fixture", ["Color"], (30, 250)),
    _t("garden", "Home & Kitchen › Storage & Organization › Clothing & Closet Storage › Coat Racks",
       "coat racks", "Coat Rack", "space saving, non slip, heavy duty, easy assemble, living room",
       ["Color"], (20, 90)),
    _t("garden", "Home & Kitchen › Home Décor Products › Candles & Holders › Candles › Birthday Candles",
       "party supplies", "Birthday Candles", "birthday cake, birthday party, easy use, baby shower, "
       "party decorations", ["Color", "Pack"], (4, 20)),
    _t("grocery", "Grocery & Gourmet Food › Snacks & Sweets › Snack Mixes", "party mix", "Snack Mix",
       "gluten free, non gmo, individually wrapped, great gift, low calorie, ready eat", ["Flavor", "Pack"],
       (6, 40)),
    _t("grocery", "Grocery & Gourmet Food › Snacks & Sweets › Granola & Nutrition Bars",
       "granola & nutrition bars", "Protein Bars", "low carb, low sugar, gluten free, high protein, dairy free, "
       "simple ingredients", ["Flavor", "Count"], (12, 45)),
    _t("grocery", "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee", "coffee",
       "Ground Coffee", "medium roast, non gmo, usda organic, fair trade, dark roast", ["Flavor", "FoodSize"],
       (8, 40)),
    _t("grocery", "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Herbal", "herbal tea",
       "Herbal Tea Bags", "caffeine free, usda organic, non gmo, individually wrapped, gluten free",
       ["Flavor", "Count"], (5, 30)),
]
